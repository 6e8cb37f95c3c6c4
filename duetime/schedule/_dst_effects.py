"""Find the DST transitions that change what a cron schedule does, for ``schedule lint``.

Walking every occurrence of a year would be slow for second-level schedules; instead the zone's
transitions in the range are located first, and only the wall times inside each gap or repeated
span are matched against the expression.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from duetime.schedule._notes import clock_text, offset_text, walls_text
from duetime.schedule._types import DstEffect
from duetime.schedule._zones import ZoneTransition, zone_transitions

if TYPE_CHECKING:
    from duetime.schedule._cron import CronSchedule

__all__ = ["cron_dst_effects"]


def _utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)


def _effect(schedule: CronSchedule, transition: ZoneTransition) -> DstEffect | None:
    start, end = transition.wall_start, transition.wall_end
    walls = tuple(schedule.wall_clock.walls_between(start, end))
    if not walls:
        return None
    span = f"{clock_text(start)}-{clock_text(end)}"
    at = transition.at.replace(tzinfo=None)
    if transition.is_gap:
        what = walls_text(walls, "does not exist", "do not exist")
        if schedule.spec.dst_gap == "skip":
            return DstEffect(
                start.date(), "skipped", walls, (), f"{what} (DST gap {span}); skipped"
            )
        moved = f"runs once at {clock_text(end)} ({offset_text(transition.offset_after)})"
        return DstEffect(
            start.date(), "shifted", walls, (_utc(at),), f"{what} (DST gap {span}); {moved}"
        )
    what = walls_text(walls, "happens twice", "happen twice")
    before, after = transition.offset_before, transition.offset_after
    firsts = tuple(_utc(wall - before) for wall in walls)
    if schedule.spec.dst_overlap == "once":
        note = f"{what} (DST overlap {span}); runs once, at the first ({offset_text(before)})"
        return DstEffect(start.date(), "once", walls, firsts, note)
    seconds = tuple(_utc(wall - after) for wall in walls)
    note = (
        f"{what} (DST overlap {span}); runs twice ({offset_text(before)} and {offset_text(after)})"
    )
    return DstEffect(start.date(), "doubled", walls, tuple(sorted(firsts + seconds)), note)


def cron_dst_effects(schedule: CronSchedule, start: datetime, end: datetime) -> list[DstEffect]:
    """Return the DST effects on ``schedule`` of the transitions in [start, end) (aware)."""
    effects = []
    for transition in zone_transitions(schedule.zone, start, end):
        effect = _effect(schedule, transition)
        if effect is not None:
            effects.append(effect)
    return effects
