"""Catch-up after an outage: once, all (bounded, oldest dropped), skip; on-time runs always."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_kit import utc

from duetime.errors import ScheduleError
from duetime.schedule import CatchUp, ScheduleSpec, compile_schedule, plan_due

EVERY_5 = compile_schedule(ScheduleSpec("cron", "*/5 * * * *"))


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return utc(2025, 1, 1, hour, minute, second)


def test_nothing_due_yet() -> None:
    plan = plan_due(EVERY_5, at(10, 5), at(10, 4), "once", 10)
    assert plan.occurrences == () and plan.next_run_at == at(10, 5)


def test_on_time_runs_with_lookahead() -> None:
    # The planner passes now + lookahead: every occurrence up to it is materialized.
    plan = plan_due(EVERY_5, at(10, 0), at(10, 0, 30), "skip", 0)
    assert plan.occurrences == (at(10, 0),)
    assert plan.next_run_at == at(10, 5)
    plan = plan_due(EVERY_5, at(10, 0), at(10, 10), "skip", 0, grace=timedelta(minutes=15))
    assert plan.occurrences == (at(10, 0), at(10, 5), at(10, 10))
    assert plan.next_run_at == at(10, 15)


def test_once_runs_the_most_recent_missed_occurrence() -> None:
    plan = plan_due(EVERY_5, at(8, 0), at(10, 2), "once", 10)
    assert plan.occurrences == (at(10, 0),)
    assert plan.next_run_at == at(10, 5)


def test_once_keeps_on_time_occurrences_too() -> None:
    plan = plan_due(EVERY_5, at(8, 0), at(10, 5, 30), "once", 10)
    assert plan.occurrences == (at(10, 0), at(10, 5))
    assert plan.next_run_at == at(10, 10)


def test_all_is_bounded_and_drops_the_oldest() -> None:
    plan = plan_due(EVERY_5, at(8, 0), at(10, 2), "all", 3)
    assert plan.occurrences == (at(9, 50), at(9, 55), at(10, 0))
    every = plan_due(EVERY_5, at(8, 0), at(10, 2), "all", 1000)
    assert len(every.occurrences) == 25 and every.occurrences[0] == at(8, 0)
    assert plan_due(EVERY_5, at(8, 0), at(10, 2), "all", 0).occurrences == ()


def test_skip_drops_missed_occurrences() -> None:
    plan = plan_due(EVERY_5, at(8, 0), at(10, 2), "skip", 10)
    assert plan.occurrences == ()
    assert plan.next_run_at == at(10, 5)


def test_what_a_policy_leaves_out_is_reported_as_one_range() -> None:
    once = plan_due(EVERY_5, at(8, 0), at(10, 2), "once", 10)
    assert once.skipped == (at(8, 0), at(10, 0))  # 08:00 .. 09:55 left out, 10:00 runs
    skip = plan_due(EVERY_5, at(8, 0), at(10, 2), "skip", 10)
    assert skip.skipped == (at(8, 0), at(10, 1))  # every missed one, up to the cut-off
    bounded = plan_due(EVERY_5, at(8, 0), at(10, 2), "all", 3)
    assert bounded.skipped == (at(8, 0), at(9, 50))
    assert plan_due(EVERY_5, at(8, 0), at(10, 2), "all", 1000).skipped is None
    assert plan_due(EVERY_5, at(10, 0), at(10, 0, 30), "skip", 0).skipped is None  # on time


def test_one_off_that_was_missed_still_runs_once() -> None:
    schedule = compile_schedule(ScheduleSpec("at", "2025-01-01T08:00:00Z"))
    plan = plan_due(schedule, at(8, 0), at(10, 0), "once", 1)
    assert plan.occurrences == (at(8, 0),) and plan.next_run_at is None
    assert plan_due(schedule, at(8, 0), at(10, 0), "skip", 1).occurrences == ()


def test_long_outage_of_a_per_second_schedule_is_cheap() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "* * * * * *"))
    started = time.perf_counter()
    plan = plan_due(schedule, utc(2025, 1, 1), utc(2025, 1, 8), "all", 100)
    assert time.perf_counter() - started < 1.0
    assert len(plan.occurrences) == 100 + 61  # newest missed + the on-time minute
    assert plan.occurrences[99] == utc(2025, 1, 7, 23, 58, 59)
    assert plan.next_run_at == utc(2025, 1, 8, 0, 0, 1)


def test_catch_up_across_a_dst_gap_uses_real_occurrences() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin"))
    plan = plan_due(schedule, utc(2025, 3, 28, 1, 30), utc(2025, 3, 31, 12), "all", 10)
    assert plan.occurrences == (
        utc(2025, 3, 28, 1, 30),
        utc(2025, 3, 29, 1, 30),
        utc(2025, 3, 30, 1, 0),
        utc(2025, 3, 31, 0, 30),
    )


@pytest.mark.parametrize(
    ("policy", "max_catch_up", "grace", "field"),
    [
        ("sometimes", 1, timedelta(0), "catch_up"),
        ("all", -1, timedelta(0), "max_catch_up"),
        ("once", 1, timedelta(seconds=-1), "grace"),
    ],
)
def test_bad_policy_arguments(policy: str, max_catch_up: int, grace: timedelta, field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        plan_due(EVERY_5, at(8, 0), at(10, 0), policy, max_catch_up, grace)  # type: ignore[arg-type]
    assert caught.value.field == field


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["* * * * *", "*/7 * * * *", "0 */3 * * *", "*/15 * * * * *"]),
    st.integers(0, 20_000),
    st.integers(0, 200_000),
    st.sampled_from(["once", "all", "skip"]),
    st.integers(0, 50),
    st.integers(0, 600),
)
def test_plans_are_made_of_real_occurrences(
    expression: str,
    start_minutes: int,
    outage_seconds: int,
    policy: CatchUp,
    max_catch_up: int,
    grace_seconds: int,
) -> None:
    schedule = compile_schedule(ScheduleSpec("cron", expression, "America/New_York"))
    first = schedule.next_after(utc(2024, 11, 2) + timedelta(minutes=start_minutes))
    assert first is not None
    now = first + timedelta(seconds=outage_seconds)
    grace = timedelta(seconds=grace_seconds)
    plan = plan_due(schedule, first, now, policy, max_catch_up, grace)
    every = [first]
    while (following := schedule.next_after(every[-1])) is not None and following <= now:
        every.append(following)
    on_time = [instant for instant in every if instant >= now - grace]
    missed = [instant for instant in every if instant < now - grace]
    expected_missed = {
        "once": missed[-1:],
        "all": missed[-max_catch_up:] if max_catch_up else [],
        "skip": [],
    }[policy]
    assert list(plan.occurrences) == expected_missed + on_time
    assert plan.next_run_at == schedule.next_after(every[-1])
    assert plan.next_run_at is None or plan.next_run_at > now
    # The skipped range holds exactly the missed occurrences the policy left out.
    left_out = [instant for instant in missed if instant not in expected_missed]
    if plan.skipped is None:
        assert left_out == []
    else:
        low, high = plan.skipped
        assert [instant for instant in every if low <= instant < high] == left_out
        assert left_out and low == left_out[0]
