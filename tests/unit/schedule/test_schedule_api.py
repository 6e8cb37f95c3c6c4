"""The public surface of duetime.schedule: an explicit, tested ``__all__`` and no drivers."""

from __future__ import annotations

import subprocess
import sys

import duetime.schedule as schedule

EXPECTED = {
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
}


def test_all_is_exactly_the_public_api() -> None:
    assert set(schedule.__all__) == EXPECTED
    assert len(schedule.__all__) == len(EXPECTED)
    for name in schedule.__all__:
        assert getattr(schedule, name) is not None
    public = {name for name in vars(schedule) if not name.startswith("_")}
    assert public - EXPECTED <= {"annotations"}


def test_spec_defaults() -> None:
    spec = schedule.ScheduleSpec("cron", "0 0 * * *")
    assert (spec.time_zone, spec.dst_gap, spec.dst_overlap, spec.start_at) == (
        "UTC",
        "shift",
        "once",
        None,
    )
    assert hash(spec) == hash(schedule.ScheduleSpec("cron", "0 0 * * *"))


def test_importing_the_schedule_package_loads_no_driver() -> None:
    forbidden = [
        "sqlalchemy",
        "psycopg",
        "confluent_kafka",
        "faust",
        "httpx",
        "fastavro",
        "aetcd",
        "croniter",
        "duetime.store",
        "duetime.bus",
        "duetime.coord",
    ]
    code = f"import sys, duetime.schedule; print([m for m in {forbidden!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
