"""How far this process's clock is from the database clock the due instants are written in.

A run's ``due_at`` is an instant on the planner's database clock. A dispatcher whose host clock
runs 2 s ahead would fire every run 2 s early, silently. The planner stamps each due record with
the database clock at the time it published it (``duetime-sent-at-ms``), so for every record::

    received_at(local) - sent_at(db) = offset + transit,   transit >= 0

where ``offset`` is local minus database time. Transit only ever adds, so the *minimum* of that
difference over recent records is the tightest upper bound on the offset: with enough records
one of them had a near-zero transit. The estimate is therefore never below the true offset, and
correcting by it (judging due instants by ``local - estimate``) can make a release late by the
smallest transit seen, never early.

Records that sat in queues give loose bounds: in a burst, every record of the window may have
spent a second in the broker's fetch and the intake's buffers. So the dispatcher also reads the
database clock directly every few seconds and feeds it in as one more sample (sent = the
database's ``clock_timestamp()``, received = this host's clock when the answer is back): the
same kind of upper bound, with a round trip of a few milliseconds as its "transit". The records
still matter when the database cannot be reached, and they show a planner whose clock disagrees.

The minimum is taken over a sliding window (default 5 minutes, kept as per-bucket minima, so
each sample is O(1)), so that an old estimate ages out when the host clock is stepped. Records
read from a backlog (after a restart, or from a planner batch that took long between its
database ``now()`` and the send) carry large differences; they never lower the minimum, so they
do no harm.

A worker judges a run claimed ahead of its due instant the same way: its samples are the claim
statements' database ``now()`` against this host's clock when the answer is back
(``duetime_workers.due_clock``).

Small estimates are not corrected (``threshold``, default 50 ms): on one host the true offset is
zero and the estimate is just the smallest transit; correcting it would only add lateness.

Pure: the caller passes local times; tests drive it with a fake clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["ClockOffset"]

_MS = timedelta(milliseconds=1)


@dataclass
class _Bucket:
    start_ms: int
    min_delta_ms: int


class ClockOffset:
    """A sliding-window minimum of (local receive time - database send time).

    Args:
        window: how long a sample counts.
        bucket: the granularity of the window (samples are kept as one minimum per bucket).
        threshold: estimates within +/- this are treated as no offset (:attr:`correction_ms`).
        warn_at: estimates beyond +/- this are :attr:`skewed` (the service logs ``clock.skew``).
    """

    def __init__(
        self,
        *,
        window: timedelta = timedelta(minutes=5),
        bucket: timedelta = timedelta(seconds=10),
        threshold: timedelta = timedelta(milliseconds=50),
        warn_at: timedelta = timedelta(seconds=1),
    ) -> None:
        if bucket <= timedelta(0) or window < bucket:
            raise ValueError("clock offset window must be at least one positive bucket")
        if threshold < timedelta(0) or warn_at < threshold:
            raise ValueError("clock offset threshold must be >= 0 and <= warn_at")
        self._window_ms = int(window / _MS)
        self._bucket_ms = int(bucket / _MS)
        self._threshold_ms = int(threshold / _MS)
        self._warn_ms = int(warn_at / _MS)
        self._buckets: deque[_Bucket] = deque()
        self._estimate_ms: int | None = None
        self.samples = 0

    def observe(self, received_at_ms: int, sent_at_ms: int) -> None:
        """One record (or a batch's smallest difference): received locally at ``received_at_ms``,
        sent at ``sent_at_ms`` on the database clock (both epoch ms)."""
        delta = received_at_ms - sent_at_ms
        start = received_at_ms - received_at_ms % self._bucket_ms
        buckets = self._buckets
        self.samples += 1
        if buckets and buckets[-1].start_ms >= start:
            last = buckets[-1]
            if delta < last.min_delta_ms:
                last.min_delta_ms = delta
        else:
            buckets.append(_Bucket(start, delta))
        self._expire(received_at_ms)
        if self._estimate_ms is None or delta < self._estimate_ms:
            self._estimate_ms = delta

    def expire(self, now_ms: int) -> None:
        """Forget samples older than the window as of ``now_ms`` (local epoch ms)."""
        self._expire(now_ms)

    @property
    def estimate_ms(self) -> int | None:
        """The offset estimate (local minus database, ms; an upper bound), None without samples."""
        return self._estimate_ms

    @property
    def correction_ms(self) -> int:
        """What to subtract from the local clock to judge due instants: the estimate when it is
        beyond the threshold, else 0."""
        estimate = self._estimate_ms
        if estimate is None or abs(estimate) <= self._threshold_ms:
            return 0
        return estimate

    @property
    def skewed(self) -> bool:
        """The estimate is beyond ``warn_at``: worth a WARNING."""
        return self._estimate_ms is not None and abs(self._estimate_ms) > self._warn_ms

    def _expire(self, now_ms: int) -> None:
        buckets = self._buckets
        horizon = now_ms - self._window_ms
        expired = False
        while buckets and buckets[0].start_ms + self._bucket_ms <= horizon:
            buckets.popleft()
            expired = True
        if expired:
            self._estimate_ms = min((b.min_delta_ms for b in buckets), default=None)
