"""Ending attempts whose lease expired: the next attempt after a backoff, or ``dead``.

Two callers, one statement per batch for both: the stream (``LeaseExpirer.judge``: the attempts
whose announced lease has passed, asked about in one statement that also locks the expired ones)
and the safety-net scan (``LeaseExpirer.scan``: whatever the database finds expired, for attempts
the stream never showed). Either way the database clock decides, the end is fenced by the
attempt's lease token, and the transaction holds no lock across anything slower than the two
statements. The ``lease.expired`` lines are written after the commit, so a rolled-back round
logs nothing it did not do.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from duetime.logs import event
from duetime.schedule import retry_delay
from duetime.store import Store, Tx
from duetime.store.leases import (
    LeaseCheck,
    LeaseExpiry,
    runs_expire_batch,
    runs_expired_among,
)
from duetime.store.rows import ExpiredLease

__all__ = ["ExpiryCounts", "Judgement", "LeaseExpirer", "expiry_for"]

log = logging.getLogger("duetime.reaper")

_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class ExpiryCounts:
    expired: int = 0
    retried: int = 0
    dead: int = 0

    def __add__(self, other: ExpiryCounts) -> ExpiryCounts:
        return ExpiryCounts(
            self.expired + other.expired, self.retried + other.retried, self.dead + other.dead
        )


@dataclass(frozen=True)
class Judgement:
    """The database's answer about a batch of ``LeaseCheck``s.

    ``ended``: attempts this round ended, by (run_id, attempt). ``alive``: attempts still running,
    with their lease's expiry. ``locked_expired``: attempts found expired whose end did not
    apply (cannot happen under the lock; looked at again, never assumed gone). Anything else
    is no longer running.
    """

    ended: frozenset[tuple[uuid.UUID, int]]
    alive: dict[tuple[uuid.UUID, int], datetime]
    locked_expired: frozenset[tuple[uuid.UUID, int]]
    counts: ExpiryCounts


def expiry_for(lease: ExpiredLease) -> LeaseExpiry:
    """Retry after the job's backoff while attempts are left, else ``dead``."""
    error = f"lease expired (worker {lease.worker or 'unknown'})"
    if lease.attempt < lease.max_attempts:
        delay = retry_delay(lease.retry, str(lease.run_id), lease.attempt)
        return LeaseExpiry(lease, "scheduled", delay, error)
    return LeaseExpiry(lease, "dead", timedelta(0), error)


class LeaseExpirer:
    """The reaper's expiry statements (``duetime/store/sql/reaper.sql``)."""

    def __init__(
        self,
        store: Store,
        *,
        batch_size: int,
        on_expired: Callable[[ExpiryCounts, str], None] | None = None,
    ) -> None:
        """``on_expired(counts, source)`` is told each batch's counts (the metrics)."""
        self.store = store
        self.batch_size = batch_size
        self._on_expired = on_expired

    def scan(self) -> ExpiryCounts:
        """End one batch of whatever the database finds expired (the safety net)."""
        with self.store.tx() as tx:
            ended = self._end(tx, tx.runs_get_expired(self.batch_size))
        return self._report(ended, "scan")

    def judge(self, checks: Sequence[LeaseCheck]) -> Judgement:
        """Ask about ``checks`` (at most ``batch_size``) and end those expired, in one
        transaction."""
        with self.store.tx() as tx:
            verdicts = runs_expired_among(tx, checks)
            ended = self._end(tx, verdicts.expired)
        counts = self._report(ended, "stream")
        done = frozenset((e.lease.run_id, e.lease.attempt) for e in ended)
        return Judgement(
            ended=done,
            alive=verdicts.alive,
            locked_expired=frozenset((lease.run_id, lease.attempt) for lease in verdicts.expired)
            - done,
            counts=counts,
        )

    def _end(self, tx: Tx, leases: Sequence[ExpiredLease]) -> list[LeaseExpiry]:
        expiries = [expiry_for(lease) for lease in leases]
        ended = runs_expire_batch(tx, expiries)
        return [e for e in expiries if e.lease.run_id in ended]

    def _report(self, ended: Sequence[LeaseExpiry], source: str) -> ExpiryCounts:
        for expiry in ended:
            lease = expiry.lease
            retrying = expiry.state == "scheduled"
            event(
                log,
                "lease.expired",
                logging.WARNING,
                run_id=lease.run_id,
                attempt=lease.attempt,
                worker=lease.worker,
                outcome=expiry.state,
                retry_in_ms=int(expiry.retry_delay / _MS) if retrying else None,
                source=source,
            )
        retried = sum(1 for e in ended if e.state == "scheduled")
        counts = ExpiryCounts(expired=len(ended), retried=retried, dead=len(ended) - retried)
        if self._on_expired is not None and ended:
            self._on_expired(counts, source)
        return counts
