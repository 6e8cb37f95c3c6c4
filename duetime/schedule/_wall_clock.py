"""Enumerate the naive wall times that match parsed cron fields, in increasing order.

This is calendar arithmetic only: no zone, no DST. The DST rule is applied afterwards, per
candidate wall time (see ``_dst``), which is what keeps it correct in every zone: the expression
is matched against the wall clock people read, never against a shifted UTC instant.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from collections.abc import Iterator
from datetime import datetime, timedelta

from duetime.schedule._cron_fields import CronFields

__all__ = ["WallClock"]

_ONE_SECOND = timedelta(seconds=1)
# Longest possible wait between matches is a leap day under Vixie AND-semantics (8 years
# across a skipped century leap year); searching 30 years means "never" only near year 9999.
_SEARCH_YEARS = 30
_DAY_CACHE_LIMIT = 4096
_LAST_SECOND = datetime(9999, 12, 31, 23, 59, 59)


class WallClock:
    """Find matching wall times quickly: bisect on sorted fields, day lists cached per month."""

    __slots__ = ("_day_cache", "_fields", "_hours", "_minutes", "_month_set", "_seconds")

    def __init__(self, fields: CronFields) -> None:
        self._fields = fields
        self._seconds = fields.seconds
        self._minutes = fields.minutes
        self._hours = fields.hours
        self._month_set = frozenset(fields.months)
        self._day_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    @property
    def fields(self) -> CronFields:
        """The parsed fields this clock matches."""
        return self._fields

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        key = (year, month)
        cached = self._day_cache.get(key)
        if cached is not None:
            return cached
        fields = self._fields
        first_weekday, length = calendar.monthrange(year, month)  # Monday = 0
        weekdays = frozenset(fields.weekdays)
        day_set = frozenset(fields.days)
        days: list[int] = []
        for day in range(1, length + 1):
            cron_weekday = (first_weekday + day) % 7  # (Monday=0 weekday + 1) % 7, Sunday = 0
            in_month = day in day_set
            in_week = cron_weekday in weekdays
            if (in_month or in_week) if fields.day_or else (in_month and in_week):
                days.append(day)
        result = tuple(days)
        if len(self._day_cache) >= _DAY_CACHE_LIMIT:
            self._day_cache.clear()
        self._day_cache[key] = result
        return result

    def _time_at_or_after(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour, minute, seconds[k]
                j += 1
            if j < len(minutes):
                return hour, minutes[j], seconds[0]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0], seconds[0]
        return None

    def next_wall(self, start: datetime, *, inclusive: bool) -> datetime | None:
        """Return the first matching wall time at or after (``inclusive``) or after ``start``.

        Returns None only when nothing matches within 30 years or before year 9999.
        """
        # ``start`` may be aware (a local time): only its wall-clock fields are read.
        year, month, day = start.year, start.month, start.day
        hour, minute, second = start.hour, start.minute, start.second
        if not inclusive and not start.microsecond and second < 59:
            second += 1  # the common case, without building a datetime
        elif start.microsecond or not inclusive:
            whole = datetime(year, month, day, hour, minute, second)
            if whole >= _LAST_SECOND:
                return None
            whole += _ONE_SECOND
            year, month, day = whole.year, whole.month, whole.day
            hour, minute, second = whole.hour, whole.minute, whole.second
        last_year = min(9999, year + _SEARCH_YEARS)
        while year <= last_year:
            if month not in self._month_set:
                later = [m for m in self._fields.months if m > month]
                if later:
                    month = later[0]
                else:
                    year += 1
                    month = self._fields.months[0]
                day, hour, minute, second = 1, 0, 0, 0
                continue
            days = self._day_cache.get((year, month))
            if days is None:
                days = self._days(year, month)
            i = bisect_left(days, day)
            if i == len(days):
                year, month = (year + 1, 1) if month == 12 else (year, month + 1)
                day, hour, minute, second = 1, 0, 0, 0
                continue
            if days[i] != day:
                day, hour, minute, second = days[i], 0, 0, 0
            found = self._time_at_or_after(hour, minute, second)
            if found is not None:
                return datetime(year, month, day, *found)
            day, hour, minute, second = day + 1, 0, 0, 0
        return None

    def matches(self, wall: datetime) -> bool:
        """Return True when the naive wall time matches every field (seconds included)."""
        if wall.microsecond:
            return False
        return self.next_wall(wall, inclusive=True) == wall

    def walls_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Yield matching wall times in [start, end)."""
        wall = self.next_wall(start, inclusive=True)
        while wall is not None and wall < end:
            yield wall
            wall = self.next_wall(wall, inclusive=False)
