"""The reaper's batched statements (sql/reaper.sql): judge leases, end the expired ones.

The reaper learns of leases from the heartbeat stream and asks the database about many at once:
``runs_expired_among`` says which of them expired by the database clock (and locks those), and
``runs_expire_batch`` ends them, fenced by lease token, all in the caller's transaction. The
safety-net scan feeds ``runs_get_expired``'s rows to the same ``runs_expire_batch``. One
statement per batch, never one per run (per-run work made the first pipeline far too slow), and one
statement for every end of an attempt (``runs_complete_batch``), whoever ends it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .attempts import AttemptEnd, complete_batch
from .queries import query
from .rows import ExpiredLease
from .store import Tx

__all__ = [
    "REAPER",
    "LeaseCheck",
    "LeaseExpiry",
    "LeaseVerdicts",
    "runs_expire_batch",
    "runs_expired_among",
]

# Who ends an expired attempt, where a completion names its worker.
REAPER = "reaper"


@dataclass(frozen=True)
class LeaseCheck:
    """An attempt the reaper believes may have expired."""

    run_id: uuid.UUID
    scheduled_for: datetime
    attempt: int


@dataclass(frozen=True)
class LeaseVerdicts:
    """What the database says about a batch of ``LeaseCheck``s.

    ``expired``: locked in the caller's transaction, to be ended by ``runs_expire_batch``.
    ``alive``: still running, with the lease's current expiry by (run_id, attempt); this
    includes rows another transaction held locked at that moment, whatever their expiry.
    A check in neither is no longer running (ended, or the run has another attempt now).
    """

    expired: list[ExpiredLease]
    alive: dict[tuple[uuid.UUID, int], datetime]


@dataclass(frozen=True)
class LeaseExpiry:
    """End ``lease``'s attempt: ``state`` is ``scheduled`` (retry after ``retry_delay``) or
    ``dead``; ``error`` is recorded on the run and on the attempt."""

    lease: ExpiredLease
    state: str
    retry_delay: timedelta
    error: str


def runs_expired_among(tx: Tx, checks: Sequence[LeaseCheck]) -> LeaseVerdicts:
    if not checks:
        return LeaseVerdicts([], {})
    rows = tx.conn.execute(
        query("runs_expired_among"),
        {
            "run_ids": [c.run_id for c in checks],
            "scheduled_fors": [c.scheduled_for for c in checks],
            "attempts": [c.attempt for c in checks],
        },
    ).all()
    expired = [ExpiredLease.from_row(r) for r in rows if r.expired]
    alive = {(r.run_id, r.attempt): r.lease_expires_at for r in rows if not r.expired}
    return LeaseVerdicts(expired, alive)


def runs_expire_batch(tx: Tx, expiries: Sequence[LeaseExpiry]) -> set[uuid.UUID]:
    """End the attempts in one statement; returns the run ids it ended.

    The end of an expired attempt is the same transition as a worker's completion, fenced by the
    lease token (``runs_complete_batch``), with the outcome ``lease_expired``. The leases must
    have been locked in this transaction by the read that found them expired
    (``runs_get_expired``, ``runs_expired_among``): then none can have been renewed or
    completed since, so none is refused (a refused one would be recorded as a fenced
    completion of ``REAPER``)."""
    ends = [
        AttemptEnd(
            run_id=e.lease.run_id,
            scheduled_for=e.lease.scheduled_for,
            attempt=e.lease.attempt,
            lease_token=e.lease.lease_token,
            state=e.state,
            outcome="lease_expired",
            error=e.error,
            retry_delay=e.retry_delay,
        )
        for e in expiries
    ]
    accepted = complete_batch(tx.conn, REAPER, ends)
    return {e.lease.run_id for e in expiries if e.lease.lease_token in accepted}
