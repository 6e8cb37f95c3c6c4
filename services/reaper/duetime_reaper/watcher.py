"""Expire what the stream shows has passed: the lease book's due watches, judged in batches.

``LeaseWatcher.run_once(now)`` takes the watches whose announced lease (plus the grace) has
passed by ``now`` and asks the database about them, ``batch_size`` per transaction
(``LeaseJudge``: ``LeaseExpirer.judge``). The database ends those it finds expired and reports
the rest; the book forgets the ended and the no-longer-running ones and looks again at the
others when their lease, as the database now reports it, has passed. A batch that cannot be
asked (the database is down) is looked at again ``retry_pause`` later; nothing is assumed.

``now`` is an instant on the database's clock: ``DbClock`` estimates it from this host's clock
and an offset it measures by reading the database clock now and then, so that the deadlines
the database wrote (carried by the heartbeats) compare with it even when the hosts' clocks
disagree. The estimate only decides *when to ask*; whether a lease expired is always the
database's ``lease_expires_at < now()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from duetime.errors import DuetimeError
from duetime.logs import event
from duetime.store.leases import LeaseCheck

from .expiry import Judgement
from .lease_book import LeaseBook, Watch

__all__ = ["DbClock", "LeaseJudge", "LeaseWatcher", "WatchStats"]

log = logging.getLogger("duetime.reaper")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class DbClock:
    """This host's clock corrected by the measured offset of the database's clock.

    ``measure`` reads the database clock once and takes the midpoint of the call as the
    instant it was read at, so the error is at most half the round trip (plus the drift since).
    """

    def __init__(self, now: Callable[[], datetime] = _utc_now) -> None:
        self._now = now
        self.offset = timedelta(0)
        self.measured_at: datetime | None = None  # on this host's clock

    def now(self) -> datetime:
        return self._now() + self.offset

    def measure(self, read_db_clock: Callable[[], datetime]) -> None:
        before = self._now()
        db_now = read_db_clock()
        after = self._now()
        self.offset = db_now - (before + (after - before) / 2)
        self.measured_at = after

    def stale(self, interval: timedelta) -> bool:
        return self.measured_at is None or self._now() - self.measured_at >= interval


class LeaseJudge(Protocol):
    """Asks the database about a batch of attempts and ends the expired ones."""

    def judge(self, checks: Sequence[LeaseCheck]) -> Judgement: ...


@dataclass(frozen=True)
class WatchStats:
    judged: int = 0  # watches the database was asked about
    expired: int = 0
    retried: int = 0
    dead: int = 0
    alive: int = 0  # still held in the database: looked at again later
    gone: int = 0  # no longer running (ended before the reaper got to it)
    failed: int = 0  # watches that could not be asked about: looked at again after a pause

    def __add__(self, other: WatchStats) -> WatchStats:
        return WatchStats(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class LeaseWatcher:
    """The stream's expiry round; see the module docstring."""

    def __init__(
        self,
        book: LeaseBook,
        judge: LeaseJudge,
        *,
        batch_size: int,
        retry_pause: timedelta = timedelta(seconds=2),
    ) -> None:
        self.book = book
        self.judge = judge
        self.batch_size = batch_size
        self.retry_pause = retry_pause

    def run_once(self, now: datetime) -> WatchStats:
        due = self.book.due(now)
        total = WatchStats()
        for start in range(0, len(due), self.batch_size):
            total += self._judge(due[start : start + self.batch_size], now)
        return total

    def _judge(self, batch: list[Watch], now: datetime) -> WatchStats:
        checks = [LeaseCheck(w.run_id, w.scheduled_for, w.attempt) for w in batch]
        try:
            judgement = self.judge.judge(checks)
        except DuetimeError as exc:
            self.book.retry(batch, now + self.retry_pause)
            event(log, "reaper.judge_failed", logging.ERROR, leases=len(batch), error=exc)
            return WatchStats(failed=len(batch))
        alive = gone = 0
        for watch in batch:
            key = (watch.run_id, watch.attempt)
            if key in judgement.ended:
                self.book.gone(watch)
            elif key in judgement.alive:
                self.book.alive(watch, judgement.alive[key], now)
                alive += 1
            elif key in judgement.locked_expired:
                self.book.alive(watch, watch.lease_expires_at, now)
                alive += 1
            else:
                self.book.gone(watch)
                gone += 1
        counts = judgement.counts
        return WatchStats(
            judged=len(batch),
            expired=counts.expired,
            retried=counts.retried,
            dead=counts.dead,
            alive=alive,
            gone=gone,
        )
