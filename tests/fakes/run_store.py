"""An in-memory ``RunStore`` (the worker's port) with the compare-and-set rules of worker.sql.

tests/integration/test_run_store_contract.py runs the same contract suite against it and against
the real ``duetime.store.Store``, so the fake cannot drift. Runs are created on first sight in
state ``scheduled`` with no attempt behind them (``add`` makes one explicitly).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from duetime.errors import StoreError
from duetime.store import (
    DEFERRED,
    AttemptEnd,
    Claim,
    ClaimDeferred,
    ClaimRequest,
    LeaseRenewal,
    Unclaim,
)

__all__ = ["FakeRun", "FakeStore"]


@dataclass
class FakeRun:
    state: str = "scheduled"
    attempt: int = 0
    token: uuid.UUID | None = None
    # what an async target reported (runs.progress): kept across attempts, returned by a claim
    progress: str | None = None
    # lease token -> (attempt, outcome) of every attempt this run had (the run_attempts table)
    attempts: dict[uuid.UUID, tuple[int, str | None]] = field(default_factory=dict)
    # when it is due; a claim before then counts its lease from it (a claim ahead)
    due_at: datetime | None = None


@dataclass
class FakeStore:
    """The worker's batched statements with the same rules as worker.sql.

    ``claim_errors`` / ``complete_errors`` make the next calls fail before doing anything;
    ``claim_lost_replies`` / ``complete_lost_replies`` make them fail *after* their effect
    (a commit whose reply never arrived). ``heartbeat_hang`` blocks renewals until set,
    ``complete_hang`` completions.
    """

    runs: dict[uuid.UUID, FakeRun] = field(default_factory=dict)
    claim_errors: int = 0
    claim_lost_replies: int = 0
    heartbeat_hang: threading.Event | None = None
    complete_hang: threading.Event | None = None
    complete_errors: int = 0
    complete_lost_replies: int = 0
    renewals: int = 0
    claim_calls: int = 0
    complete_calls: int = 0
    unclaimed: int = 0
    completions: list[AttemptEnd] = field(default_factory=list)
    fenced: list[AttemptEnd] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # jobs with an overlap policy: a claim ahead of their runs is DEFERRED to the due instant
    overlap_jobs: set[str] = field(default_factory=set)

    def run(self, run_id: uuid.UUID) -> FakeRun:
        return self.runs.setdefault(run_id, FakeRun())

    def runs_claim_batch(
        self, worker: str, requests: Sequence[ClaimRequest]
    ) -> dict[uuid.UUID, Claim | ClaimDeferred]:
        with self.lock:
            self.claim_calls += 1
            if self.claim_errors:
                self.claim_errors -= 1
                raise StoreError("database error: OperationalError: connection refused")
            now = datetime.now(UTC)
            claims: dict[uuid.UUID, Claim | ClaimDeferred] = {}
            for req in requests:
                run = self.run(req.run_id)
                starts = max(now, run.due_at) if req.ahead and run.due_at else now
                if run.state == "running" and run.token == req.lease_token:
                    claims[req.lease_token] = Claim(
                        run.attempt, run.token, starts + req.lease, now, run.progress
                    )
                    continue
                if req.ahead and req.job_id in self.overlap_jobs:
                    claims[req.lease_token] = DEFERRED
                    continue
                if run.state != "scheduled" or run.attempt != req.attempt - 1:
                    continue
                run.state, run.attempt, run.token = "running", req.attempt, req.lease_token
                run.attempts[req.lease_token] = (req.attempt, None)
                claims[req.lease_token] = Claim(
                    req.attempt, req.lease_token, starts + req.lease, now, run.progress
                )
            if self.claim_lost_replies:
                self.claim_lost_replies -= 1
                raise StoreError("database error: OperationalError: server closed the connection")
            return claims

    def runs_renew_batch(self, renewals: Sequence[LeaseRenewal]) -> dict[uuid.UUID, datetime]:
        if self.heartbeat_hang is not None:
            self.heartbeat_hang.wait()  # a silent partition: the call neither fails nor returns
        with self.lock:
            self.renewals += 1
            now = datetime.now(UTC)
            return {
                r.lease_token: now + r.lease
                for r in renewals
                if (run := self.run(r.run_id)).state == "running" and run.token == r.lease_token
            }

    def runs_complete_batch(self, worker: str, ends: Sequence[AttemptEnd]) -> set[uuid.UUID]:
        if self.complete_hang is not None:
            self.complete_hang.wait()  # a silent partition: the call neither fails nor returns
        with self.lock:
            self.complete_calls += 1
            if self.complete_errors:
                self.complete_errors -= 1
                raise StoreError("database error: OperationalError: server closed the connection")
            accepted: set[uuid.UUID] = set()
            for end in ends:
                run = self.run(end.run_id)
                if run.state == "running" and run.token == end.lease_token:
                    if end.state == "running":  # handed over to an async target (202)
                        self.completions.append(end)
                        accepted.add(end.lease_token)
                        continue
                    run.state, run.token = end.state, None
                    run.attempts[end.lease_token] = (end.attempt, end.outcome)
                    self.completions.append(end)
                    accepted.add(end.lease_token)
                elif run.attempts.get(end.lease_token) in (
                    (end.attempt, "succeeded"),
                    (end.attempt, "failed"),
                    (end.attempt, "handed_back"),
                ):
                    accepted.add(end.lease_token)  # our own earlier, committed completion
                else:
                    self.fenced.append(end)
            if self.complete_lost_replies:
                self.complete_lost_replies -= 1
                raise StoreError("database error: OperationalError: server closed the connection")
            return accepted

    def runs_unclaim_batch(self, unclaims: Sequence[Unclaim]) -> set[uuid.UUID]:
        with self.lock:
            given_back: set[uuid.UUID] = set()
            for unclaim in unclaims:
                run = self.run(unclaim.run_id)
                if (
                    run.state == "running"
                    and run.token == unclaim.lease_token
                    and run.attempt == unclaim.attempt
                ):
                    run.state, run.attempt, run.token = "scheduled", unclaim.attempt - 1, None
                    run.attempts.pop(unclaim.lease_token, None)
                    given_back.add(unclaim.lease_token)
            self.unclaimed += len(given_back)
            return given_back

    def db_clock(self) -> datetime:
        return datetime.now(UTC)

    def steal(self, run_id: uuid.UUID) -> None:
        """What the reaper does to an expired lease: the token changes hands."""
        with self.lock:
            run = self.run(run_id)
            if run.token is not None:
                run.attempts[run.token] = (run.attempt, "lease_expired")
            run.token = uuid.uuid4()
