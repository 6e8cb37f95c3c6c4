"""The DST rule: turn matching wall times into instants in a zone.

Each matching wall time ``w`` is classified with zoneinfo's two readings of it (``fold=0`` and
``fold=1``):

* same offset both ways: a normal wall time, one instant;
* ``fold=0`` offset larger: an overlap (clocks went back), ``w`` happens twice; ``once`` keeps
  the first pass, ``twice`` keeps both;
* ``fold=0`` offset smaller: a gap (clocks jumped forward), ``w`` does not exist; ``shift`` runs
  once at the first instant after the gap (the transition itself), however many wall times of
  the expression fell into it; ``skip`` runs nothing for them.

The search walks wall times forward from the wall time of ``after``. Overlaps are the only place
where instant order differs from wall order, so the one extra candidate needed is the second pass
of the first matching wall time of an overlap that ``after`` sits in (``twice`` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from duetime.schedule._types import DstGap, DstOverlap
from duetime.schedule._wall_clock import WallClock
from duetime.schedule._zones import transition_between

__all__ = ["Hit", "HitKind", "WallReading", "next_hit", "read_wall"]

HitKind = Literal["normal", "shifted", "first", "second"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One occurrence found by the search.

    Attributes:
        instant: Naive UTC.
        wall: The matching wall time that produced it (inside the gap for ``shifted``).
        kind: ``normal``, ``shifted`` (gap), ``first`` or ``second`` (pass of an overlap).
    """

    instant: datetime
    wall: datetime
    kind: HitKind


@dataclass(frozen=True, slots=True)
class WallReading:
    """How a zone reads one naive wall time.

    Attributes:
        kind: ``normal``, ``gap`` or ``overlap``.
        transition: For a gap or an overlap, the instant of the change (naive UTC).
        span_start: First wall time of the gap or of the repeated span.
        span_end: First wall time after it.
        offset_before: Offset before the transition (the only offset when normal).
        offset_after: Offset after the transition.
    """

    kind: Literal["normal", "gap", "overlap"]
    transition: datetime | None
    span_start: datetime | None
    span_end: datetime | None
    offset_before: timedelta
    offset_after: timedelta


def _offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    first = zone.utcoffset(wall)
    # The constructor is faster than ``wall.replace(fold=1)`` on this hot path.
    refold = datetime(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second, fold=1)
    second = zone.utcoffset(refold)
    assert first is not None and second is not None  # ZoneInfo always answers
    return first, second


def _transition(zone: ZoneInfo, wall: datetime, before: timedelta, after: timedelta) -> datetime:
    # The transition lies between the two readings of the wall time.
    low, high = sorted((wall - before, wall - after))
    return transition_between(zone, low, high)


def read_wall(zone: ZoneInfo, wall: datetime) -> WallReading:
    """Classify a naive wall time in ``zone`` (normal, gap or overlap) with its span."""
    before, after = _offsets(zone, wall)
    if before == after:
        return WallReading("normal", None, None, None, before, after)
    transition = _transition(zone, wall, before, after)
    kind: Literal["gap", "overlap"] = "gap" if after > before else "overlap"
    return WallReading(
        kind,
        transition,
        transition + min(before, after),
        transition + max(before, after),
        before,
        after,
    )


def next_hit(
    clock: WallClock,
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    after: datetime,
    local: datetime,
) -> Hit | None:
    """Return the first occurrence strictly after ``after`` under the DST rule.

    Args:
        clock: The expression's matcher.
        zone: The zone whose wall clock it is read on.
        gap: The DST gap rule.
        overlap: The DST overlap rule.
        after: The instant, naive UTC.
        local: The same instant as an aware datetime in ``zone`` (its fold tells the pass).
    """
    extra: Hit | None = None
    if overlap == "twice" and local.fold == 0:
        start = datetime(local.year, local.month, local.day, local.hour, local.minute, local.second)
        before, later = _offsets(zone, start)
        if later < before:
            # ``after`` is in the first pass of an overlap: the second pass of the span's first
            # matching wall time may come before the next wall time's first pass.
            transition = _transition(zone, start, before, later)
            wall = clock.next_wall(transition + later, inclusive=True)
            if wall is not None and wall < transition + before:
                extra = Hit(wall - later, wall, "second")
    hit = _forward(clock, zone, gap, overlap, after, local)
    if extra is not None and (hit is None or extra.instant < hit.instant):
        return extra
    return hit


def _forward(
    clock: WallClock,
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    after: datetime,
    start: datetime,
) -> Hit | None:
    """Walk matching wall times after ``start`` (the local reading of ``after``) to the first
    one that yields an instant after ``after``, jumping over gaps and passed overlaps whole."""
    wall = clock.next_wall(start, inclusive=False)
    while wall is not None:
        before, later = _offsets(zone, wall)
        if before == later:
            return Hit(wall - before, wall, "normal")
        if later < before:  # overlap
            first = wall - before
            if first > after:
                return Hit(first, wall, "first")
            # ``after`` is in the second pass of this very overlap.
            if overlap == "twice":
                return Hit(wall - later, wall, "second")
            transition = _transition(zone, wall, before, later)
            wall = clock.next_wall(transition + before, inclusive=True)
            continue
        transition = _transition(zone, wall, before, later)  # gap
        if gap == "shift":
            return Hit(transition, wall, "shifted")
        wall = clock.next_wall(transition + later, inclusive=True)
    return None
