"""When a run claimed ahead is due, by this host's clock: the database clock, as well as the
worker can tell.

A run's ``due_at`` is an instant on the database clock. A worker that holds a run claimed ahead
(docs/claim-ahead.md) starts it when its own clock, corrected by the estimated offset, reaches
that instant. Each sample is a database time and this host's clock once the answer is back,
which is later than that instant by the call's time, so ``received - database time`` bounds
this host's offset from above (:class:`duetime.clock_offset.ClockOffset`). Judging by
``local - estimate`` can start a run late by the smallest round trip seen, never early.

The samples: a ``clock_timestamp()`` read at start and every 10 s (a tight bound: a round trip
of a few ms), and each claim statement's ``now()`` (loose in a spike, when a statement takes
long, and then harmless: the window keeps the minimum).

Samples are taken on the database threads and read on the event loop, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from duetime.bus.run_headers import epoch_ms
from duetime.clock_offset import ClockOffset

__all__ = ["DueClock"]

_MS = timedelta(milliseconds=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class DueClock:
    """This host's clock corrected towards the database clock (a sliding-window estimate)."""

    def __init__(self, now: Callable[[], datetime] = _utc_now) -> None:
        self._now = now
        self._offset = ClockOffset()
        self._lock = threading.Lock()

    def observe(self, claimed_at: datetime) -> None:
        """A claim statement's database ``now()``, its answer just received."""
        received_ms = epoch_ms(self._now())
        with self._lock:
            self._offset.observe(received_ms, epoch_ms(claimed_at))

    def until(self, due_at: datetime) -> float:
        """Seconds until ``due_at`` on the database clock (negative: past)."""
        correction_ms = self._offset.correction_ms
        return (due_at - self._now()).total_seconds() + correction_ms / 1000

    def db_now(self) -> datetime:
        """Now on the database clock, as well as this host can tell."""
        return self._now() - self._offset.correction_ms * _MS

    @property
    def estimate_ms(self) -> int | None:
        """The offset estimate (this host minus the database, an upper bound), if any."""
        return self._offset.estimate_ms
