"""The cold tier's bucket math (duetime/cold_tier.py), and a six-month reminder on the planner's
in-memory twin with a moved clock: cold when written, loaded an hour ahead, planned on time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duetime.bus.topics import TopicCatalog
from duetime.cold_tier import (
    MIN_HOT_HORIZON,
    bucket_of,
    cold_bucket_for,
    load_before,
    validate_hot_horizon,
)
from duetime.config import load_settings
from duetime.errors import ConfigError
from duetime.schedule import ScheduleSpec
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner
from tests.fakes.planner_store import FakePlannerStore, FakeProducer, due_job

HOUR = timedelta(hours=1)
NOW = datetime(2026, 12, 3, 12, 20, tzinfo=UTC)
instants = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def test_a_bucket_is_the_utc_hour_whatever_the_offset_of_the_instant() -> None:
    kolkata = timezone(timedelta(hours=5, minutes=30))
    # 03:00 in Kolkata is 21:30 UTC the day before: bucket 21:00 UTC, not a half-hour grid.
    assert bucket_of(datetime(2026, 12, 4, 3, 0, tzinfo=kolkata)) == datetime(
        2026, 12, 3, 21, tzinfo=UTC
    )
    assert bucket_of(datetime(2026, 12, 3, 12, tzinfo=UTC)) == datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert bucket_of(datetime(1999, 12, 31, 23, 59, tzinfo=UTC)) == datetime(
        1999, 12, 31, 23, tzinfo=UTC
    )
    with pytest.raises(ValueError):
        bucket_of(datetime(2026, 12, 3, 12))


@given(instants)
def test_a_bucket_starts_on_the_hour_at_or_before_the_instant(instant: datetime) -> None:
    bucket = bucket_of(instant)
    assert bucket <= instant < bucket + HOUR
    assert (bucket.minute, bucket.second, bucket.microsecond) == (0, 0, 0)


def test_cold_exactly_when_the_bucket_starts_at_or_after_the_horizon() -> None:
    # now 12:20, horizon 1 h: buckets from 13:20 on are cold, so 14:00 is the first cold one.
    assert cold_bucket_for(datetime(2026, 12, 3, 13, 59, tzinfo=UTC), NOW, HOUR) is None
    assert cold_bucket_for(datetime(2026, 12, 3, 14, 0, tzinfo=UTC), NOW, HOUR) == datetime(
        2026, 12, 3, 14, tzinfo=UTC
    )
    assert cold_bucket_for(None, NOW, HOUR) is None
    assert cold_bucket_for(NOW - timedelta(days=1), NOW, HOUR) is None


@given(instants, instants)
def test_a_job_written_cold_is_never_in_a_bucket_the_loader_has_passed(
    next_run_at: datetime, now: datetime
) -> None:
    # The loader at ``now`` loads every bucket starting before load_before(now); a write at the
    # same instant never puts a job cold into one of those, so nothing is left behind.
    bucket = cold_bucket_for(next_run_at, now, HOUR)
    if bucket is None:
        assert bucket_of(next_run_at) < load_before(now, HOUR)
    else:
        assert bucket >= load_before(now, HOUR) and next_run_at >= now + HOUR


def test_the_hot_horizon_has_a_floor() -> None:
    assert validate_hot_horizon(MIN_HOT_HORIZON) == MIN_HOT_HORIZON
    with pytest.raises(ConfigError, match="hot horizon"):
        validate_hot_horizon(timedelta(minutes=5))
    with pytest.raises(ConfigError, match="max_lookahead"):
        PlannerConfig(max_lookahead=timedelta(minutes=59, seconds=55), hot_horizon=HOUR)


def test_a_reminder_six_months_ahead_is_loaded_an_hour_ahead_and_planned_on_time() -> None:
    store = FakePlannerStore(NOW)
    fires_at = NOW + timedelta(days=182, minutes=10)
    reminder = ScheduleSpec(kind="at", expression=fires_at.isoformat(), time_zone="UTC")
    store.add_job(due_job("reminder", next_run_at=fires_at, schedule=reminder))
    assert store.state.cold == {"reminder": bucket_of(fires_at)}
    clock = [0.0]
    planner = Planner(
        store,
        FakeProducer(),
        TopicCatalog("t."),
        PlannerConfig(max_lookahead=timedelta(seconds=30)),
        monotonic=lambda: clock[0],
    )

    def round_at(instant: datetime) -> tuple[int, int]:
        store.clock = instant
        clock[0] += 10.0  # past the loader's interval
        planner.ensure_partitions(instant.date())
        stats = planner.run_once(clock[0])
        return stats.cold_jobs_loaded, stats.runs_created

    assert round_at(NOW) == (0, 0)
    assert round_at(bucket_of(fires_at) - timedelta(hours=1, seconds=1)) == (0, 0)
    assert "reminder" in store.state.cold
    # Once its bucket starts within the hour, the loader makes it hot; it is not due yet.
    assert round_at(bucket_of(fires_at) - HOUR + timedelta(seconds=1)) == (1, 0)
    assert "reminder" not in store.state.cold
    # Within the lookahead of its instant, it is planned for that instant.
    assert round_at(fires_at - timedelta(seconds=20)) == (0, 1)
    (run,) = store.runs_of("reminder")
    assert run.run.scheduled_for == fires_at
    assert store.job("reminder").next_run_at is None  # a one-off: done


def test_the_hot_horizon_is_read_from_the_environment(tmp_path: Path) -> None:
    assert load_settings(tmp_path, {}).hot_horizon == HOUR
    assert load_settings(tmp_path, {"DUETIME_HOT_HORIZON": "7200"}).hot_horizon == 2 * HOUR
    for raw in ("soon", "nan", "60"):
        with pytest.raises(ConfigError, match=r"DUETIME_HOT_HORIZON|hot horizon"):
            load_settings(tmp_path, {"DUETIME_HOT_HORIZON": raw})
