"""Test helpers for the schedule tests: transition finders and an independent brute-force oracle.

The oracle deliberately shares no code with ``duetime.schedule`` beyond zone loading: it walks
UTC minutes one by one, reads each on the zone's wall clock with ``astimezone`` and applies the
DST rule from its definition, so a bug in the fast search cannot hide in the reference.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.schedule import Schedule, ZoneTransition, validate_time_zone, zone_transitions

NAMED_ZONES = (
    "America/New_York",
    "America/Santiago",
    "Europe/Berlin",
    "Europe/London",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kathmandu",
    "Asia/Kolkata",
)
ONE_MINUTE = timedelta(minutes=1)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """Build an aware UTC datetime."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@functools.cache
def transitions_in_year(zone_name: str, year: int) -> tuple[ZoneTransition, ...]:
    """Every offset change of a zone in one year (probed every 6 h, located to the second)."""
    zone = validate_time_zone(zone_name)
    return tuple(
        zone_transitions(zone, utc(year, 1, 1), utc(year + 1, 1, 1), step=timedelta(hours=6))
    )


@dataclass(frozen=True)
class CronSets:
    """A cron expression together with the value sets it means, built independently."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_of_month_star: bool
    day_of_week_star: bool
    seconds: frozenset[int] = frozenset({0})

    def matches(self, wall: datetime) -> bool:
        """Vixie matching of a naive wall time."""
        if wall.second not in self.seconds or wall.minute not in self.minutes:
            return False
        if wall.hour not in self.hours:
            return False
        in_month = wall.day in self.days
        in_week = (wall.weekday() + 1) % 7 in self.weekdays
        if self.day_of_month_star or self.day_of_week_star:
            return in_month and in_week
        return in_month or in_week


def oracle(
    sets: CronSets,
    zone: ZoneInfo,
    gap: str,
    overlap: str,
    start: datetime,
    end: datetime,
    step: timedelta = ONE_MINUTE,
) -> list[datetime]:
    """All occurrences in (start, end) by brute force over UTC minutes (or ``step``)."""
    found: set[datetime] = set()
    cursor = start.replace(second=0, microsecond=0)
    while cursor < end:
        local = cursor.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        if cursor > start and sets.matches(wall) and (local.fold == 0 or overlap == "twice"):
            found.add(cursor)
        cursor += step
    if gap == "shift":
        for transition in zone_transitions(zone, start - timedelta(days=1), end):
            if not transition.is_gap or not start < transition.at < end:
                continue
            wall = transition.wall_start
            while wall < transition.wall_end:
                if sets.matches(wall):
                    found.add(transition.at)
                    break
                wall += step
    return sorted(found)


def chain(schedule: Schedule, start: datetime, end: datetime) -> Iterator[datetime]:
    """Occurrences in (start, end) by repeated ``next_after``."""
    cursor = schedule.next_after(start)
    while cursor is not None and cursor < end:
        yield cursor
        cursor = schedule.next_after(cursor)
