"""Pure time math for duetime: cron in IANA zones with a DST rule, intervals, one-off instants,
run windows, catch-up after an outage, overlap decisions and retry backoff. No I/O.

The rules in plain words are in ``docs/time-rules.md``; the DST rule is in ``_dst``. Modules:

* ``_cron_fields`` parses cron text; ``_wall_clock`` enumerates matching wall times;
* ``_zones`` loads zones from the pinned tzdata and finds offset transitions;
* ``_dst`` turns wall times into instants under the gap/overlap rule; ``_cron`` wraps it;
* ``_interval`` and ``_at`` are the other schedule kinds; ``_compile`` validates a spec;
* ``_windows``, ``_catchup``, ``_overlap``, ``_backoff`` are the run-time decisions;
* ``_batch`` is the cached many-jobs API for the planner.

Every input error is a ``duetime.errors.ScheduleError(field, reason)``.
"""

from __future__ import annotations

from duetime.schedule._backoff import (
    RetryPolicy,
    has_attempts_left,
    retry_base_delay,
    retry_delay,
)
from duetime.schedule._batch import ScheduleCache, next_fires
from duetime.schedule._catchup import CatchUpPlan, plan_due
from duetime.schedule._compile import compile_schedule
from duetime.schedule._interval import parse_duration
from duetime.schedule._overlap import OverlapDecision, overlap_decision
from duetime.schedule._stable_hash import stable_hash64
from duetime.schedule._types import (
    CatchUp,
    DstEffect,
    DstEffectKind,
    DstGap,
    DstOverlap,
    Occurrence,
    OverlapPolicy,
    Schedule,
    ScheduleKind,
    ScheduleSpec,
)
from duetime.schedule._windows import due_at, window_offset
from duetime.schedule._zones import (
    TZDATA_VERSION,
    ZoneTransition,
    available_zones,
    validate_time_zone,
    zone_transitions,
)

__all__ = [
    "TZDATA_VERSION",
    "CatchUp",
    "CatchUpPlan",
    "DstEffect",
    "DstEffectKind",
    "DstGap",
    "DstOverlap",
    "Occurrence",
    "OverlapDecision",
    "OverlapPolicy",
    "RetryPolicy",
    "Schedule",
    "ScheduleCache",
    "ScheduleKind",
    "ScheduleSpec",
    "ZoneTransition",
    "available_zones",
    "compile_schedule",
    "due_at",
    "has_attempts_left",
    "next_fires",
    "overlap_decision",
    "parse_duration",
    "plan_due",
    "retry_base_delay",
    "retry_delay",
    "stable_hash64",
    "validate_time_zone",
    "window_offset",
    "zone_transitions",
]
