"""Cron schedules: wall-clock matching in an IANA zone, with the per-schedule DST rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.schedule._cron_fields import CronFields
from duetime.schedule._dst import Hit, next_hit, read_wall
from duetime.schedule._dst_effects import cron_dst_effects
from duetime.schedule._instants import as_aware_utc, require_aware, to_naive_utc
from duetime.schedule._notes import clock_text, offset_text, walls_text
from duetime.schedule._types import DstEffect, Occurrence, ScheduleSpec
from duetime.schedule._wall_clock import WallClock
from duetime.schedule._zones import fixed_offset

__all__ = ["CronSchedule"]

_ONE_MICROSECOND = timedelta(microseconds=1)
_EARLIEST = datetime(1, 1, 2)


class CronSchedule:
    """A compiled cron schedule; immutable apart from internal caches, shareable across jobs."""

    __slots__ = ("_clock", "_fixed", "_memo", "_not_before", "_zone", "spec")

    def __init__(self, spec: ScheduleSpec, fields: CronFields, zone: ZoneInfo) -> None:
        self.spec = spec
        self._clock = WallClock(fields)
        self._zone = zone
        self._fixed = fixed_offset(zone)
        # start_at is the earliest instant that may fire: search from just before it.
        self._not_before = (
            None if spec.start_at is None else to_naive_utc(spec.start_at) - _ONE_MICROSECOND
        )
        # The last answer: (after, answer naive, answer aware). Any ``after`` in
        # [memo[0], memo[1]) has the same answer, which is what jobs sharing a schedule and a
        # slot ask for at midnight. One tuple, replaced whole, so threads never see it torn.
        self._memo: tuple[datetime, datetime, datetime] | None = None

    @property
    def zone(self) -> ZoneInfo:
        """The IANA zone whose wall clock the expression is read on."""
        return self._zone

    @property
    def wall_clock(self) -> WallClock:
        """The matcher for the expression's fields."""
        return self._clock

    def _hit_after(self, after_utc: datetime, after: datetime | None = None) -> Hit | None:
        if self._not_before is not None and after_utc < self._not_before:
            after_utc, after = self._not_before, None
        if after_utc < _EARLIEST:  # 1 January of year 1 has no local time in every zone
            after_utc, after = _EARLIEST, None
        try:
            fixed = self._fixed
            if fixed is not None:  # UTC and Etc/*: no DST to resolve
                wall = self._clock.next_wall(after_utc + fixed, inclusive=False)
                return None if wall is None else Hit(wall - fixed, wall, "normal")
            local = (as_aware_utc(after_utc) if after is None else after).astimezone(self._zone)
            return next_hit(
                self._clock,
                self._zone,
                self.spec.dst_gap,
                self.spec.dst_overlap,
                after_utc,
                local,
            )
        except OverflowError:  # the search ran past datetime.max: nothing fires any more
            return None

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first occurrence strictly after ``after`` (aware), as aware UTC."""
        after_utc = to_naive_utc(after)
        memo = self._memo
        if memo is not None and memo[0] <= after_utc < memo[1]:
            return memo[2]
        hit = self._hit_after(after_utc, after)
        if hit is None:
            return None
        answer = as_aware_utc(hit.instant)
        self._memo = (after_utc, hit.instant, answer)
        return answer

    def occurrences(self, after: datetime, count: int) -> list[Occurrence]:
        """Return up to ``count`` occurrences after ``after``, each with a note when DST mattered.

        A wall time dropped by ``dst_gap="skip"`` produces no occurrence; the next occurrence
        carries a note saying what was skipped, so a preview never hides it.
        """
        require_aware(after, "after")
        results: list[Occurrence] = []
        cursor = to_naive_utc(after)
        while len(results) < count:
            hit = self._hit_after(cursor)
            if hit is None:
                break
            results.append(self._describe(hit, cursor))
            cursor = hit.instant
        return results

    def dst_effects(self, start: datetime, end: datetime) -> list[DstEffect]:
        """Return what DST transitions in [start, end) do to this schedule (for lint)."""
        require_aware(start, "start")
        require_aware(end, "end")
        return cron_dst_effects(self, start, end)

    def _describe(self, hit: Hit, previous: datetime) -> Occurrence:
        instant = hit.instant.replace(tzinfo=UTC)
        local = instant.astimezone(self._zone)
        offset = local.utcoffset()
        assert offset is not None
        notes: list[str] = []
        if self.spec.dst_gap == "skip":
            notes.extend(
                f"before this, {effect.note}"
                for effect in cron_dst_effects(self, _utc(previous), instant)
                if effect.kind == "skipped"
            )
        if hit.kind == "shifted":
            notes.append(self._shift_note(hit, local))
        elif hit.kind in ("first", "second"):
            what = f"{clock_text(hit.wall)} happens twice on {hit.wall.date().isoformat()}"
            if self.spec.dst_overlap == "once":
                rule = f"runs once, at the first ({offset_text(offset)})"
            else:
                rule = f"runs twice, this is the {hit.kind} ({offset_text(offset)})"
            notes.append(f"{what} (DST overlap); {rule}")
        return Occurrence(instant, local, hit.wall, "; ".join(notes) or None)

    def _shift_note(self, hit: Hit, local: datetime) -> str:
        reading = read_wall(self._zone, hit.wall)
        assert reading.span_start is not None and reading.span_end is not None
        walls = list(self._clock.walls_between(reading.span_start, reading.span_end))
        what = walls_text(walls, "does not exist", "do not exist")
        gap = f"{clock_text(reading.span_start)}-{clock_text(reading.span_end)}"
        offset = local.utcoffset()
        assert offset is not None
        moved = f"runs once at {clock_text(reading.span_end)} ({offset_text(offset)})"
        if self._clock.matches(reading.span_end):
            moved += ", together with the regular run at that time"
        return f"{what} (DST gap {gap}); {moved}"


def _utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)
