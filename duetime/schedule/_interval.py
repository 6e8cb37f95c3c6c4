"""Fixed-interval schedules: a grid of instants ``anchor + k * interval``, k >= 0.

Intervals measure elapsed time, so they ignore DST and zones entirely: ``PT1H`` is 3600 s even
on the night the clocks change. Calendar units (years ``Y``, months ``M`` before ``T``) have no
fixed length and are refused; use a cron expression for "monthly".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.errors import ScheduleError
from duetime.schedule._instants import require_aware, to_naive_utc
from duetime.schedule._types import DstEffect, Occurrence, ScheduleSpec

__all__ = ["MAX_INTERVAL", "MIN_INTERVAL", "IntervalSchedule", "parse_duration"]

MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=36_600)
_EPOCH = datetime(1970, 1, 1)
_MAX_LENGTH = 64

_DURATION = re.compile(
    r"P(?:(?P<weeks>[0-9]+)W)?(?:(?P<days>[0-9]+)D)?"
    r"(?:T(?:(?P<hours>[0-9]+)H)?(?:(?P<minutes>[0-9]+)M)?"
    r"(?:(?P<seconds>[0-9]+)(?:[.,](?P<fraction>[0-9]{1,6}))?S)?)?",
    re.ASCII,
)

# The same shape with years and months, only to explain why they are refused.
_CALENDAR = re.compile(
    r"P(?P<years>[0-9]+Y)?(?P<months>[0-9]+M)?(?:[0-9]+W)?(?:[0-9]+D)?(?:T[0-9HMS.,]*)?",
    re.ASCII,
)


def _fail(reason: str) -> ScheduleError:
    return ScheduleError("schedule", reason)


def parse_duration(text: str) -> timedelta:
    """Parse an ISO-8601 duration made of weeks, days, hours, minutes and seconds.

    Raises:
        ScheduleError: With field "schedule" for malformed, calendar-based, too short
            (under 1 s) or too long (over 100 years) durations.
    """
    if not isinstance(text, str):
        raise _fail(f"must be a string, not {type(text).__name__}")
    if len(text) > _MAX_LENGTH:
        raise _fail(f"is {len(text)} characters long; not an ISO-8601 duration")
    if not text.isascii():
        raise _fail("contains non-ASCII characters; expected an ISO-8601 duration such as PT5M")
    upper = text.strip().upper()
    match = _DURATION.fullmatch(upper)
    if match is None or upper in ("P", "PT") or upper.endswith("T"):
        calendar = _CALENDAR.fullmatch(upper)
        if calendar is not None and (calendar["years"] or calendar["months"]):
            raise _fail(
                f"{text!r}: years and months have no fixed length; use a cron expression "
                "for calendar schedules"
            )
        raise _fail(f"{text!r} is not an ISO-8601 duration such as PT30S, PT5M, PT1H or P1D")
    parts = {name: int(value) for name, value in match.groupdict().items() if value is not None}
    fraction = match["fraction"]
    microseconds = int(fraction.ljust(6, "0")) if fraction else 0
    try:
        duration = timedelta(
            weeks=parts.get("weeks", 0),
            days=parts.get("days", 0),
            hours=parts.get("hours", 0),
            minutes=parts.get("minutes", 0),
            seconds=parts.get("seconds", 0),
            microseconds=microseconds,
        )
    except OverflowError:
        raise _fail(f"{text!r} is longer than {MAX_INTERVAL.days} days") from None
    if duration < MIN_INTERVAL:
        raise _fail(f"{text!r} is shorter than the minimum interval of 1 second")
    if duration > MAX_INTERVAL:
        raise _fail(f"{text!r} is longer than {MAX_INTERVAL.days} days")
    return duration


class IntervalSchedule:
    """Every ``interval`` of elapsed time from an anchor instant (the Unix epoch by default)."""

    __slots__ = ("_anchor", "_interval", "_zone", "spec")

    def __init__(self, spec: ScheduleSpec, interval: timedelta, zone: ZoneInfo) -> None:
        self.spec = spec
        self._interval = interval
        self._zone = zone
        self._anchor = _EPOCH if spec.start_at is None else to_naive_utc(spec.start_at)

    @property
    def interval(self) -> timedelta:
        """The fixed elapsed time between occurrences."""
        return self._interval

    def _next_naive(self, after: datetime) -> datetime | None:
        if after < self._anchor:
            return self._anchor
        steps = (after - self._anchor) // self._interval + 1
        try:
            return self._anchor + steps * self._interval
        except OverflowError:
            return None

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first grid instant strictly after ``after`` (aware), as aware UTC."""
        found = self._next_naive(to_naive_utc(after))
        return None if found is None else found.replace(tzinfo=UTC)

    def occurrences(self, after: datetime, count: int) -> list[Occurrence]:
        """Return up to ``count`` grid instants after ``after``; intervals never carry DST notes."""
        require_aware(after, "after")
        results: list[Occurrence] = []
        cursor: datetime | None = to_naive_utc(after)
        while cursor is not None and len(results) < count:
            cursor = self._next_naive(cursor)
            if cursor is not None:
                instant = cursor.replace(tzinfo=UTC)
                local = instant.astimezone(self._zone)
                results.append(Occurrence(instant, local, local.replace(tzinfo=None)))
        return results

    def dst_effects(self, start: datetime, end: datetime) -> list[DstEffect]:
        """Return no effects: elapsed time does not change when the clocks do."""
        require_aware(start, "start")
        require_aware(end, "end")
        return []
