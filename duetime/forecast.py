"""The due-load forecast: runs due per minute ahead, per target and tenant, and the minutes
whose load exceeds a target's rate limit (pile-ups). Pure: the store supplies the rows.

Two sources add up, and never overlap: runs already planned and waiting (``runs`` rows still
``scheduled``, by ``due_at``), and the occurrences of the jobs beyond them, from each job's
``next_run_at`` on (the planner advances ``next_run_at`` past the runs it plans). Jobs are
grouped by (schedule, window, target, tenant, next_run_at), so a hundred thousand midnight jobs
of one schedule cost one enumeration. A windowed group is spread evenly over the minutes of its
window, which is what the windows' hash offsets do on average (and what capacity-aware placement,
``duetime.capacity``, improves on), so a pile-up warning is about load that cannot spread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from duetime.schedule import Schedule

__all__ = [
    "ForecastResult",
    "JobGroup",
    "MinuteLoad",
    "PileUp",
    "PlannedRuns",
    "forecast",
    "minute_floor",
]

_MINUTE = timedelta(minutes=1)
# Occurrences enumerated per job group at most: one a second for a day.
_MAX_OCCURRENCES = 86_400


@dataclass(frozen=True)
class JobGroup:
    """``jobs`` jobs that share a schedule, window, target, tenant and next run."""

    schedule: Schedule
    window: timedelta
    target_service: str
    tenant: str
    next_run_at: datetime
    jobs: int


@dataclass(frozen=True)
class PlannedRuns:
    """``runs`` runs already planned for the minute starting at ``minute``."""

    minute: datetime
    target_service: str
    tenant: str
    runs: int


@dataclass(frozen=True)
class MinuteLoad:
    minute: datetime
    target_service: str
    tenant: str
    runs: float


@dataclass(frozen=True)
class PileUp:
    """A minute whose load on ``target_service`` exceeds what its rate lets through."""

    minute: datetime
    target_service: str
    runs: float
    rate_per_second: float

    @property
    def limit_per_minute(self) -> float:
        return self.rate_per_second * 60


@dataclass(frozen=True)
class ForecastResult:
    start: datetime
    end: datetime
    loads: tuple[MinuteLoad, ...]  # non-zero minutes, ordered by minute, target, tenant
    pile_ups: tuple[PileUp, ...]  # ordered by minute, target


def minute_floor(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


def forecast(
    start: datetime,
    end: datetime,
    groups: Iterable[JobGroup],
    planned: Iterable[PlannedRuns],
    rates: Mapping[str, float],
) -> ForecastResult:
    """Runs due per minute in ``[minute_floor(start), end)``.

    Args:
        start: Now (aware).
        end: The end of the horizon (exclusive).
        groups: Jobs beyond their planned runs.
        planned: Runs already planned.
        rates: Each rate-limited target's runs per second (its own, or the default's).
    """
    first = minute_floor(start)
    load: defaultdict[tuple[datetime, str, str], float] = defaultdict(float)
    for row in planned:
        if first <= row.minute < end:
            load[(row.minute, row.target_service, row.tenant)] += row.runs
    # Groups differ by target and tenant far more often than by schedule: each (schedule, start,
    # window) is enumerated and spread once, and every group of it adds its jobs on top.
    shares: dict[tuple[object, datetime, timedelta], list[tuple[datetime, float]]] = {}
    for group in groups:
        since = max(group.next_run_at, start)
        key = (group.schedule.spec, since, group.window)
        minutes = shares.get(key)
        if minutes is None:
            merged: defaultdict[datetime, float] = defaultdict(float)
            for scheduled_for in _occurrences(group.schedule, since, end):
                for minute, share in _spread(scheduled_for, group.window):
                    if first <= minute < end:
                        merged[minute] += share
            minutes = shares[key] = list(merged.items())
        for minute, share in minutes:
            load[(minute, group.target_service, group.tenant)] += share * group.jobs
    loads = tuple(
        MinuteLoad(minute, target, tenant, round(runs, 3))
        for (minute, target, tenant), runs in sorted(load.items())
        if runs > 0
    )
    per_target: defaultdict[tuple[datetime, str], float] = defaultdict(float)
    for item in loads:
        per_target[(item.minute, item.target_service)] += item.runs
    pile_ups = tuple(
        PileUp(minute, target, round(runs, 3), rates[target])
        for (minute, target), runs in sorted(per_target.items())
        if target in rates and runs > rates[target] * 60
    )
    return ForecastResult(first, end, loads, pile_ups)


def _occurrences(schedule: Schedule, start: datetime, end: datetime) -> Iterable[datetime]:
    """Occurrences in ``[start, end)``, at most ``_MAX_OCCURRENCES``."""
    current: datetime | None = schedule.next_after(start - timedelta(microseconds=1))
    for _ in range(_MAX_OCCURRENCES):
        if current is None or current >= end:
            return
        yield current
        current = schedule.next_after(current)


def _spread(scheduled_for: datetime, window: timedelta) -> list[tuple[datetime, float]]:
    """The minutes a run of a window may be due in, with the share of the runs each gets."""
    if window <= timedelta(0):
        return [(minute_floor(scheduled_for), 1.0)]
    end = scheduled_for + window
    shares: list[tuple[datetime, float]] = []
    minute = minute_floor(scheduled_for)
    total = window.total_seconds()
    while minute < end:
        overlap = min(end, minute + _MINUTE) - max(scheduled_for, minute)
        if overlap > timedelta(0):
            shares.append((minute, overlap.total_seconds() / total))
        minute += _MINUTE
    return shares if shares else [(minute_floor(scheduled_for), 1.0)]
