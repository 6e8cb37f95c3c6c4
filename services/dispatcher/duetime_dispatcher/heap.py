"""The held runs and Python's cyclic garbage collector.

The dispatcher holds every run it has read until the run is due: at 5,000 runs/s and a 30-45 s
lookahead, a couple of hundred thousand runs, six or seven objects each the collector tracks.
Those objects outlive every young-generation collection, so each collection walked the runs read
since the last one only to find them all alive: measured at a steady 5,000 runs/s, a collection
about every second, 0.1 s each (13 % of a core), plus a pass over the older
generations of 0.5-1.8 s about once a minute, during which nothing is released. What those
passes found was almost nothing: about a thousand objects of garbage cycles a minute.

So the intake moves what it has just taken into the collector's permanent generation
(``gc.freeze()``, a constant-time list splice) after each batch, and the collections that still
run walk only what was allocated since. Reference counting frees a released run's objects as
before; only a garbage cycle that was alive at a freeze waits, and :meth:`Heap.maybe_collect`
collects those with one full pass every ``every`` (default 10 min) at a moment when nothing is
due within ``quiet_for`` (1 s), or after ``at_least_every`` (1 h) in any case.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FullCollection", "Heap"]


@dataclass(frozen=True, slots=True)
class FullCollection:
    """What a full pass did: the objects frozen since the last (held runs included), those it
    found unreachable (garbage cycles), how long it took, and whether it could not wait for a
    quiet moment."""

    frozen: int
    unreachable: int
    took_s: float
    forced: bool


class Heap:
    def __init__(
        self,
        *,
        every: float = 600.0,
        at_least_every: float = 3600.0,
        quiet_for: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every = every
        self.at_least_every = at_least_every
        self.quiet_for = quiet_for
        self._monotonic = monotonic
        self._last = monotonic()

    @staticmethod
    def freeze() -> None:
        """What is alive now is left out of the collections that follow (until the next full
        pass): call it after the intake took a batch of runs to hold."""
        gc.freeze()

    def maybe_collect(self, next_due_in: float | None) -> FullCollection | None:
        """One full pass if it is time: ``every`` since the last and no run due within
        ``quiet_for`` (``next_due_in``: seconds to the next due run, ``None`` when none is
        held), or ``at_least_every`` since the last whatever is due."""
        now = self._monotonic()
        since = now - self._last
        quiet = next_due_in is None or next_due_in >= self.quiet_for
        forced = since >= self.at_least_every
        if not forced and not (since >= self.every and quiet):
            return None
        started = time.perf_counter()
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        unreachable = gc.collect()
        took = time.perf_counter() - started
        self._last = self._monotonic()
        return FullCollection(frozen, unreachable, took, forced and not quiet)
