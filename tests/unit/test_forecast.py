"""The due-load forecast (duetime.forecast): minutes, windows, planned runs, pile-ups, DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from duetime.forecast import ForecastResult, JobGroup, PlannedRuns, forecast
from duetime.schedule import ScheduleCache, ScheduleSpec

CACHE = ScheduleCache()
NOW = datetime(2026, 6, 1, 22, 15, 20, tzinfo=UTC)
MIDNIGHT = datetime(2026, 6, 2, tzinfo=UTC)


def _group(
    cron: str,
    jobs: int,
    *,
    target: str = "api.example.com",
    tenant: str = "acme",
    window: timedelta = timedelta(0),
    next_run_at: datetime = NOW,
    zone: str = "UTC",
) -> JobGroup:
    spec = ScheduleSpec(kind="cron", expression=cron, time_zone=zone)
    return JobGroup(CACHE.get(spec), window, target, tenant, next_run_at, jobs)


def _loads(result: ForecastResult) -> dict[tuple[datetime, str, str], float]:
    return {(x.minute, x.target_service, x.tenant): x.runs for x in result.loads}


def test_jobs_of_one_schedule_add_up_in_their_minute() -> None:
    result = forecast(NOW, NOW + timedelta(hours=24), [_group("0 0 * * *", 1000)], [], {})
    assert _loads(result) == {(MIDNIGHT, "api.example.com", "acme"): 1000}
    assert result.start == datetime(2026, 6, 1, 22, 15, tzinfo=UTC)
    assert result.pile_ups == ()


def test_a_window_spreads_its_runs_over_the_minutes_it_covers() -> None:
    group = _group("0 0 * * *", 90, window=timedelta(seconds=150))
    result = forecast(NOW, NOW + timedelta(hours=3), [group], [], {})
    assert _loads(result) == {
        (MIDNIGHT, "api.example.com", "acme"): pytest.approx(36),  # 60 of 150 s
        (MIDNIGHT + timedelta(minutes=1), "api.example.com", "acme"): pytest.approx(36),
        (MIDNIGHT + timedelta(minutes=2), "api.example.com", "acme"): pytest.approx(18),
    }


def test_occurrences_start_at_next_run_at_and_stop_at_the_horizon() -> None:
    every_minute = _group("* * * * *", 2, next_run_at=NOW + timedelta(minutes=10))
    result = forecast(NOW, NOW + timedelta(minutes=20), [every_minute], [], {})
    minutes = sorted(minute for minute, _, _ in _loads(result))
    assert minutes[0] == datetime(2026, 6, 1, 22, 26, tzinfo=UTC)  # after 22:25:20
    assert minutes[-1] == datetime(2026, 6, 1, 22, 35, tzinfo=UTC)  # before 22:35:20
    assert len(minutes) == 10 and set(_loads(result).values()) == {2}


def test_planned_runs_count_inside_the_range_only() -> None:
    planned = [
        PlannedRuns(MIDNIGHT, "api.example.com", "acme", 5),
        PlannedRuns(MIDNIGHT + timedelta(days=2), "api.example.com", "acme", 7),
        PlannedRuns(datetime(2026, 6, 1, 22, 15, tzinfo=UTC), "kafka:t", "globex", 1),
    ]
    result = forecast(NOW, NOW + timedelta(hours=24), [_group("0 0 * * *", 3)], planned, {})
    assert _loads(result) == {
        (datetime(2026, 6, 1, 22, 15, tzinfo=UTC), "kafka:t", "globex"): 1,
        (MIDNIGHT, "api.example.com", "acme"): 8,
    }


def test_a_pile_up_is_a_minute_above_the_targets_rate_across_tenants() -> None:
    groups = [
        _group("0 0 * * *", 400, tenant="acme"),
        _group("0 0 * * *", 300, tenant="globex"),  # 700 a minute > 10/s x 60
        _group("0 1 * * *", 500, tenant="acme"),  # 500 <= 600: fits
        _group("0 0 * * *", 5000, target="unlimited.example.com"),
    ]
    result = forecast(NOW, NOW + timedelta(hours=24), groups, [], {"api.example.com": 10.0})
    [pile_up] = result.pile_ups
    assert (pile_up.minute, pile_up.target_service, pile_up.runs) == (
        MIDNIGHT,
        "api.example.com",
        700,
    )
    assert pile_up.limit_per_minute == 600


def test_dst_shifted_runs_land_where_the_schedule_puts_them() -> None:
    """30 2 * * * in Europe/Berlin on 2025-03-30: 02:30 does not exist; shift = 03:00 CEST."""
    now = datetime(2025, 3, 29, 12, tzinfo=UTC)
    group = _group("30 2 * * *", 4, zone="Europe/Berlin", next_run_at=now)
    result = forecast(now, now + timedelta(hours=24), [group], [], {})
    assert _loads(result) == {
        (datetime(2025, 3, 30, 1, 0, tzinfo=UTC), "api.example.com", "acme"): 4
    }
