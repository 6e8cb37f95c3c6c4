"""Turn a ScheduleSpec into a Schedule, validating every field first.

Validation happens here and only here, so a spec that compiles is known-good everywhere else:
the planner never meets an unknown zone or an expression that cannot fire at run time.
"""

from __future__ import annotations

from datetime import datetime
from typing import get_args

from duetime.errors import ScheduleError
from duetime.schedule._at import AtSchedule
from duetime.schedule._cron import CronSchedule
from duetime.schedule._cron_fields import parse_cron
from duetime.schedule._instants import parse_instant
from duetime.schedule._interval import IntervalSchedule, parse_duration
from duetime.schedule._types import DstGap, DstOverlap, Schedule, ScheduleKind, ScheduleSpec
from duetime.schedule._zones import validate_time_zone

__all__ = ["compile_schedule"]


def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ScheduleError(field, f"{value!r} is not one of {', '.join(choices)}")


def compile_schedule(spec: ScheduleSpec) -> Schedule:
    """Validate ``spec`` and return the schedule that computes its occurrences.

    Raises:
        ScheduleError: ``field`` is one of "schedule", "time_zone", "dst_gap",
            "dst_overlap" or "start_at", and ``reason`` says what is wrong.
    """
    _check_choice("schedule", spec.kind, get_args(ScheduleKind))
    _check_choice("dst_gap", spec.dst_gap, get_args(DstGap))
    _check_choice("dst_overlap", spec.dst_overlap, get_args(DstOverlap))
    if spec.start_at is not None:
        if not isinstance(spec.start_at, datetime):
            raise ScheduleError("start_at", "must be a datetime")
        if spec.start_at.tzinfo is None or spec.start_at.utcoffset() is None:
            raise ScheduleError("start_at", "must be timezone-aware (an instant, not a wall time)")
    zone = validate_time_zone(spec.time_zone)
    if spec.kind == "cron":
        return CronSchedule(spec, parse_cron(spec.expression), zone)
    if spec.kind == "interval":
        return IntervalSchedule(spec, parse_duration(spec.expression), zone)
    return AtSchedule(spec, parse_instant(spec.expression, "schedule"), zone)
