"""An in-memory ``RunStore`` (the worker's port) with the compare-and-set rules of queries.sql.

It holds one run. tests/integration/test_run_store_contract.py runs the same contract suite
against it and against the real ``duetime.store.Store``, so the fake cannot drift.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from duetime.errors import StoreError
from duetime.store import Claim

__all__ = ["FakeStore"]


@dataclass
class FakeStore:
    """The worker's three statements with the same compare-and-set rules as queries.sql."""

    state: str = "scheduled"
    attempt: int = 0
    token: uuid.UUID | None = None
    claim_errors: int = 0
    heartbeat_hang: threading.Event | None = None  # set() releases hung heartbeats
    complete_errors: int = 0
    heartbeats: int = 0
    completions: list[dict[str, Any]] = field(default_factory=list)
    fenced: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def runs_claim(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        attempt: int,
        worker: str,
        lease: timedelta,
    ) -> Claim | None:
        with self.lock:
            if self.claim_errors:
                self.claim_errors -= 1
                raise StoreError("database error: OperationalError: connection refused")
            if self.state != "scheduled" or self.attempt != attempt - 1:
                return None
            self.state, self.attempt, self.token = "running", attempt, uuid.uuid4()
            now = datetime.now(UTC)
            return Claim(attempt, self.token, now + lease, now)

    def runs_heartbeat(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        lease_token: uuid.UUID,
        lease: timedelta,
        progress: str | None = None,
    ) -> datetime | None:
        if self.heartbeat_hang is not None:
            self.heartbeat_hang.wait()  # a silent partition: the call neither fails nor returns
        with self.lock:
            self.heartbeats += 1
            if self.state != "running" or lease_token != self.token:
                return None
            return datetime.now(UTC) + lease

    def runs_complete(self, **kwargs: Any) -> bool:
        with self.lock:
            if self.complete_errors:
                self.complete_errors -= 1
                raise StoreError("database error: OperationalError: server closed the connection")
            if self.state != "running" or kwargs["lease_token"] != self.token:
                self.fenced.append(kwargs)
                return False
            self.state, self.token = kwargs["state"], None
            self.completions.append(kwargs)
            return True

    def steal(self) -> None:
        """What the reaper does to an expired lease: the token changes hands."""
        with self.lock:
            self.token = uuid.uuid4()
