"""Fixed intervals (elapsed time, DST-blind) and one-off instants."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from schedule_kit import utc

from duetime.errors import ScheduleError
from duetime.schedule import ScheduleSpec, compile_schedule, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT2S", timedelta(seconds=2)),
        ("PT5M", timedelta(minutes=5)),
        ("PT1H30M", timedelta(minutes=90)),
        ("P1D", timedelta(days=1)),
        ("P1W", timedelta(weeks=1)),
        ("P1DT12H", timedelta(hours=36)),
        ("PT1.5S", timedelta(seconds=1.5)),
        ("pt10m", timedelta(minutes=10)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("P1M", "years and months have no fixed length"),
        ("P1Y", "years and months have no fixed length"),
        ("PT0S", "shorter than the minimum interval of 1 second"),
        ("PT0.5S", "shorter than the minimum interval"),
        ("P", "not an ISO-8601 duration"),
        ("PT", "not an ISO-8601 duration"),
        ("P1DT", "not an ISO-8601 duration"),
        ("5 minutes", "not an ISO-8601 duration"),
        ("", "not an ISO-8601 duration"),
        ("-PT5M", "not an ISO-8601 duration"),
        ("P99999D", "longer than 36600 days"),
        ("PT\u0665M", "non-ASCII"),
    ],
)
def test_bad_durations(text: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(ScheduleSpec("interval", text))
    assert caught.value.field == "schedule"
    assert reason in caught.value.reason


def test_interval_is_anchored_at_the_epoch_by_default() -> None:
    schedule = compile_schedule(ScheduleSpec("interval", "PT2S"))
    assert schedule.next_after(utc(2024, 1, 1, 0, 0, 1)) == utc(2024, 1, 1, 0, 0, 2)
    assert schedule.next_after(utc(2024, 1, 1, 0, 0, 2)) == utc(2024, 1, 1, 0, 0, 4)


def test_interval_anchor_is_the_first_occurrence() -> None:
    start = datetime.fromisoformat("2025-01-01T00:00:07+01:00")
    schedule = compile_schedule(ScheduleSpec("interval", "PT5M", start_at=start))
    assert schedule.next_after(utc(2020, 1, 1)) == utc(2024, 12, 31, 23, 0, 7)
    assert schedule.next_after(utc(2024, 12, 31, 23, 0, 7)) == utc(2024, 12, 31, 23, 5, 7)
    assert schedule.next_after(utc(2025, 1, 1, 10, 1)) == utc(2025, 1, 1, 10, 5, 7)


def test_intervals_ignore_dst() -> None:
    schedule = compile_schedule(ScheduleSpec("interval", "P1D", "Europe/Berlin"))
    found = schedule.occurrences(utc(2025, 3, 28, 12), 3)
    assert [item.scheduled_for for item in found] == [
        utc(2025, 3, 29),
        utc(2025, 3, 30),
        utc(2025, 3, 31),
    ]
    # 24 hours of elapsed time: the wall clock moves from 01:00 to 02:00 across the change.
    assert [item.local.hour for item in found] == [1, 1, 2]
    assert all(item.note is None for item in found)
    assert schedule.dst_effects(utc(2025, 1, 1), utc(2026, 1, 1)) == []


def test_at_fires_once() -> None:
    schedule = compile_schedule(ScheduleSpec("at", "2025-06-01T09:00:00+02:00", "Europe/Berlin"))
    assert schedule.next_after(utc(2025, 1, 1)) == utc(2025, 6, 1, 7)
    assert schedule.next_after(utc(2025, 6, 1, 7)) is None
    [only] = schedule.occurrences(utc(2025, 1, 1), 5)
    assert only.local.isoformat() == "2025-06-01T09:00:00+02:00"
    assert schedule.occurrences(utc(2025, 7, 1), 5) == []


def test_at_accepts_z_and_refuses_wall_times() -> None:
    assert compile_schedule(ScheduleSpec("at", "2025-06-01T09:00:00Z")).next_after(
        utc(2025, 1, 1)
    ) == utc(2025, 6, 1, 9)
    for text, reason in [
        ("2025-06-01T09:00:00", "has no offset"),
        ("tomorrow", "not an ISO-8601 instant"),
        ("2025-13-01T00:00:00Z", "not an ISO-8601 instant"),
        ("x" * 10_000, "characters long"),
    ]:
        with pytest.raises(ScheduleError) as caught:
            compile_schedule(ScheduleSpec("at", text))
        assert (caught.value.field, reason in caught.value.reason) == ("schedule", True)


def test_start_at_is_the_earliest_run_for_cron_and_at() -> None:
    cron = compile_schedule(ScheduleSpec("cron", "0 * * * *", start_at=utc(2025, 1, 1, 5)))
    assert cron.next_after(utc(2024, 1, 1)) == utc(2025, 1, 1, 5)
    assert cron.next_after(utc(2025, 1, 1, 5)) == utc(2025, 1, 1, 6)
    late = ScheduleSpec("at", "2025-01-01T00:00:00Z", start_at=utc(2025, 2, 1))
    assert compile_schedule(late).next_after(utc(2024, 1, 1)) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (ScheduleSpec("cron", "0 0 * * *", start_at=datetime(2025, 1, 1)), "start_at"),
        (ScheduleSpec("cron", "0 0 * * *", dst_gap="later"), "dst_gap"),  # type: ignore[arg-type]
        (ScheduleSpec("cron", "0 0 * * *", dst_overlap="both"), "dst_overlap"),  # type: ignore[arg-type]
        (ScheduleSpec("rrule", "FREQ=DAILY"), "schedule"),  # type: ignore[arg-type]
        (ScheduleSpec("interval", "PT5M", "Nowhere/City"), "time_zone"),
    ],
)
def test_compile_names_the_field(spec: ScheduleSpec, field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(spec)
    assert caught.value.field == field


def test_naive_after_is_a_caller_bug() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "0 0 * * *"))
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule.next_after(datetime(2025, 1, 1))
