"""Value types shared by the schedule modules: the spec, an occurrence, the `Schedule` protocol.

They live in one module so that every schedule kind (cron, interval, one-off instant) and every
consumer (batch API, catch-up planner, CLI) agrees on the same shapes without import cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal, Protocol

__all__ = [
    "CatchUp",
    "DstEffect",
    "DstEffectKind",
    "DstGap",
    "DstOverlap",
    "Occurrence",
    "OverlapPolicy",
    "Schedule",
    "ScheduleKind",
    "ScheduleSpec",
]

ScheduleKind = Literal["cron", "interval", "at"]
DstGap = Literal["shift", "skip"]
DstOverlap = Literal["once", "twice"]
CatchUp = Literal["once", "all", "skip"]
OverlapPolicy = Literal["allow", "skip", "buffer_one"]
DstEffectKind = Literal["shifted", "skipped", "doubled", "once"]


@dataclass(frozen=True)
class ScheduleSpec:
    """What a job declares about its timing; hashable so compiled schedules can be shared.

    Attributes:
        kind: ``cron`` (wall clock in ``time_zone``), ``interval`` (fixed elapsed time) or
            ``at`` (a single instant).
        expression: The cron text, an ISO-8601 duration (``PT5M``) or an ISO-8601 instant
            with an offset or ``Z``.
        time_zone: IANA zone name; cron fields are read on this zone's wall clock.
        dst_gap: What a cron wall time that does not exist (spring forward) does.
        dst_overlap: What a cron wall time that happens twice (fall back) does.
        start_at: For ``interval``, the anchor of the grid (None = the Unix epoch). For
            ``cron`` and ``at``, the earliest instant that may fire (None = no limit).
    """

    kind: ScheduleKind
    expression: str
    time_zone: str = "UTC"
    dst_gap: DstGap = "shift"
    dst_overlap: DstOverlap = "once"
    start_at: datetime | None = None


@dataclass(frozen=True)
class Occurrence:
    """One scheduled firing, with enough context to explain it to a person.

    Attributes:
        scheduled_for: The instant, aware UTC. This is the run's identity with the job id.
        local: The same instant on the job zone's wall clock (aware, with ``fold`` set).
        wall: The naive wall time the expression asked for. It differs from ``local`` only
            when a DST gap shifted the occurrence.
        note: Why DST changed this occurrence, in plain words; None when it did not.
    """

    scheduled_for: datetime
    local: datetime
    wall: datetime
    note: str | None = None


@dataclass(frozen=True)
class DstEffect:
    """A DST transition that changes what a cron schedule does, for ``schedule lint``.

    Attributes:
        day: The local date of the transition.
        kind: ``shifted`` (gap, runs at the gap's end), ``skipped`` (gap, no run),
            ``doubled`` (overlap, runs on both passes) or ``once`` (overlap, first pass only).
        walls: The matching naive wall times that fall in the gap or overlap.
        runs: The instants (aware UTC) that actually fire for those wall times.
        note: A one-line explanation.
    """

    day: date
    kind: DstEffectKind
    walls: tuple[datetime, ...]
    runs: tuple[datetime, ...]
    note: str


class Schedule(Protocol):
    """A compiled schedule: pure, immutable after compilation, safe to share between jobs."""

    @property
    def spec(self) -> ScheduleSpec:
        """The spec this schedule was compiled from."""
        ...

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first occurrence strictly after ``after`` (aware), as aware UTC.

        Returns None when the schedule never fires again.
        """
        ...

    def occurrences(self, after: datetime, count: int) -> list[Occurrence]:
        """Return up to ``count`` occurrences strictly after ``after``, with DST notes."""
        ...

    def dst_effects(self, start: datetime, end: datetime) -> list[DstEffect]:
        """Return the DST transitions in [start, end) that change what this schedule does."""
        ...
