"""The worker's ports: what the attempt pipeline needs from the database, bus and targets.

``duetime.store.Store`` satisfies ``RunStore``; ``announce.BusEvents`` satisfies ``RunEvents``;
``targets.Targets`` satisfies ``TargetExecutor``. Tests pass in-memory versions of each, so the
lease, fencing and retry logic runs without any server.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from duetime.events import RunHeartbeat, RunResult
from duetime.model import RunEvent
from duetime.store import AttemptEnd, Claim, ClaimDeferred, ClaimRequest, LeaseRenewal, Unclaim

from .outcome import AttemptOutcome

__all__ = ["RunEvents", "RunStore", "TargetExecutor"]


class RunStore(Protocol):
    """The worker's fenced statements, each for a whole batch (duetime/store/sql/worker.sql).

    Every method is all-or-nothing for its batch and decides each row on its own; a call retried
    with the same lease tokens after a lost reply recognises its own earlier effect.
    """

    def runs_claim_batch(
        self, worker: str, requests: Sequence[ClaimRequest]
    ) -> dict[uuid.UUID, Claim | ClaimDeferred]:
        """Successful claims by lease token; a request missing from the result claimed nothing;
        a claim ahead that must wait for the due instant is ``DEFERRED``."""
        ...

    def runs_unclaim_batch(self, unclaims: Sequence[Unclaim]) -> set[uuid.UUID]:
        """Give back attempts claimed ahead that never started; the tokens given back."""
        ...

    def db_clock(self) -> datetime:
        """The database clock right now (``clock_timestamp()``): a tight sample for the clock
        that decides when a run claimed ahead starts."""
        ...

    def runs_renew_batch(self, renewals: Sequence[LeaseRenewal]) -> dict[uuid.UUID, datetime]:
        """New expiry by lease token; a token missing from the result has lost its lease."""
        ...

    def runs_complete_batch(self, worker: str, ends: Sequence[AttemptEnd]) -> set[uuid.UUID]:
        """Lease tokens whose end was accepted; the rest were fenced (and recorded)."""
        ...


class RunEvents(Protocol):
    """Where heartbeats and results are announced (runs.heartbeats, runs.results)."""

    def heartbeat(self, heartbeat: RunHeartbeat) -> None: ...

    def result(self, result: RunResult) -> None: ...


class TargetExecutor(Protocol):
    """Runs a run's target once. Never raises for target or network failures."""

    async def prewarm(self, run: RunEvent, count: int) -> int:
        """Prepare for ``count`` executions like ``run``'s due soon (open connections ahead);
        returns how many connections were opened. Never raises for the target's failures."""
        ...

    async def execute(self, run: RunEvent, claim: Claim) -> AttemptOutcome:
        """Execute ``run`` as the attempt ``claim`` granted: the target receives the claim's
        attempt and fencing token, not the ones the message asked for."""
        ...
