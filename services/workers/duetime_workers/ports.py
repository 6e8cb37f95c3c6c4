"""The worker's ports: what the attempt pipeline needs from the database, bus and targets.

``duetime.store.Store`` satisfies ``RunStore``; ``service.BusEvents`` satisfies ``RunEvents``;
``targets.Targets`` satisfies ``TargetExecutor``. Tests pass in-memory versions of each, so the
lease, fencing and retry logic runs without any server.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Protocol

from duetime.events import RunHeartbeat, RunResult
from duetime.model import RunEvent
from duetime.store import Claim

from .outcome import AttemptOutcome

__all__ = ["RunEvents", "RunStore", "TargetExecutor"]


class RunStore(Protocol):
    """The three fenced statements of a worker (duetime/store/sql/queries.sql)."""

    def runs_claim(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        attempt: int,
        worker: str,
        lease: timedelta,
    ) -> Claim | None: ...

    def runs_heartbeat(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        lease_token: uuid.UUID,
        lease: timedelta,
        progress: str | None = None,
    ) -> datetime | None: ...

    def runs_complete(
        self,
        *,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        attempt: int,
        worker: str,
        lease_token: uuid.UUID,
        state: str,
        outcome: str,
        error: str | None = None,
        status_code: int | None = None,
        retry_delay: timedelta = timedelta(0),
    ) -> bool: ...


class RunEvents(Protocol):
    """Where heartbeats and results are announced (runs.heartbeats, runs.results)."""

    def heartbeat(self, heartbeat: RunHeartbeat) -> None: ...

    def result(self, result: RunResult) -> None: ...


class TargetExecutor(Protocol):
    """Runs a run's target once. Never raises for target or network failures."""

    async def execute(self, run: RunEvent, attempt: int) -> AttemptOutcome: ...
