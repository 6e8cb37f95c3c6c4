"""One-off schedules: a single instant, given in ISO-8601 with an offset or ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from duetime.schedule._instants import require_aware, to_naive_utc
from duetime.schedule._types import DstEffect, Occurrence, ScheduleSpec

__all__ = ["AtSchedule"]


class AtSchedule:
    """Fires once at ``instant``, unless ``start_at`` (the earliest allowed time) is later."""

    __slots__ = ("_instant", "_zone", "spec")

    def __init__(self, spec: ScheduleSpec, instant: datetime, zone: ZoneInfo) -> None:
        self.spec = spec
        self._zone = zone
        fires = spec.start_at is None or instant >= spec.start_at
        self._instant: datetime | None = to_naive_utc(instant) if fires else None

    def next_after(self, after: datetime) -> datetime | None:
        """Return the instant when it is strictly after ``after``, else None (never again)."""
        after_utc = to_naive_utc(after)
        if self._instant is None or self._instant <= after_utc:
            return None
        return self._instant.replace(tzinfo=UTC)

    def occurrences(self, after: datetime, count: int) -> list[Occurrence]:
        """Return the single occurrence when it is after ``after`` and ``count`` allows it."""
        require_aware(after, "after")
        instant = self.next_after(after)
        if instant is None or count < 1:
            return []
        local = instant.astimezone(self._zone)
        return [Occurrence(instant, local, local.replace(tzinfo=None))]

    def dst_effects(self, start: datetime, end: datetime) -> list[DstEffect]:
        """Return no effects: the instant is absolute."""
        require_aware(start, "start")
        require_aware(end, "end")
        return []
