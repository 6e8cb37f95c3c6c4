"""The planner's pure decisions: occurrences up to the lookahead, catch-up, windows, first run."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.model import RUN_ID_NAMESPACE, run_id_for
from duetime.planning import initial_next_run_at, plan_job
from duetime.schedule import ScheduleCache, ScheduleSpec, compile_schedule, due_at

NOW = datetime(2026, 12, 3, 10, 0, 0, tzinfo=UTC)
EVERY_10S = ScheduleSpec(kind="interval", expression="PT10S")


def _plan(next_run_at: datetime, catch_up: str = "once", window: timedelta = timedelta(0)):  # type: ignore[no-untyped-def]
    return plan_job(
        job_id="j",
        spec=EVERY_10S,
        window=window,
        catch_up=catch_up,
        max_catch_up=5,
        next_run_at=next_run_at,
        now=NOW,
        lookahead=timedelta(seconds=30),
        cache=ScheduleCache(),
    )


def test_on_time_job_gets_every_occurrence_up_to_the_lookahead() -> None:
    plan = _plan(NOW)
    assert [r.scheduled_for for r in plan.runs] == [
        NOW + timedelta(seconds=s) for s in (0, 10, 20, 30)
    ]
    assert plan.next_run_at == NOW + timedelta(seconds=40)
    assert all(r.run_id == run_id_for("j", r.scheduled_for) for r in plan.runs)
    assert all(r.due_at == r.scheduled_for for r in plan.runs)


def test_catch_up_policies_after_an_hour_outage() -> None:
    missed_since = NOW - timedelta(hours=1)
    on_time = [NOW + timedelta(seconds=s) for s in (-60, -50, -40, -30, -20, -10, 0, 10, 20, 30)]
    once = _plan(missed_since, "once")
    skip = _plan(missed_since, "skip")
    everything = _plan(missed_since, "all")
    # Missed = older than the on-time grace (60 s): `once` keeps the newest missed, `all` at most 5.
    assert [r.scheduled_for for r in skip.runs] == on_time
    assert [r.scheduled_for for r in once.runs] == [NOW - timedelta(seconds=70), *on_time]
    assert len(everything.runs) == 5 + len(on_time)
    assert once.next_run_at == skip.next_run_at == everything.next_run_at


def test_window_jitter_is_deterministic_and_before_the_next_occurrence() -> None:
    a = _plan(NOW, window=timedelta(seconds=8))
    b = _plan(NOW, window=timedelta(seconds=8))
    assert a == b
    for run in a.runs:
        assert run.scheduled_for <= run.due_at < run.scheduled_for + timedelta(seconds=8)


def test_each_run_is_due_as_the_window_rule_says_with_or_without_a_window() -> None:
    """Runs are due as ``due_at`` says for each window, a sub-millisecond one (no offset)
    included."""
    windows = (timedelta(0), timedelta(microseconds=999), timedelta(seconds=8), timedelta(hours=1))
    for window in windows:
        runs = _plan(NOW, window=window).runs
        following = [r.scheduled_for for r in runs[1:]] + [NOW + timedelta(seconds=40)]
        assert [r.due_at for r in runs] == [
            due_at("j", r.scheduled_for, window, nxt)
            for r, nxt in zip(runs, following, strict=True)
        ]
        if window < timedelta(milliseconds=1):
            assert all(r.due_at == r.scheduled_for for r in runs)


def test_first_run_of_a_new_job() -> None:
    cron = compile_schedule(ScheduleSpec(kind="cron", expression="0 * * * *"))
    assert initial_next_run_at(cron, NOW) == NOW + timedelta(hours=1)
    past = compile_schedule(ScheduleSpec(kind="at", expression="2020-01-01T00:00:00Z"))
    assert initial_next_run_at(past, NOW) == datetime(2020, 1, 1, tzinfo=UTC)


def test_run_ids_are_uuid5_of_the_job_and_the_microsecond() -> None:
    """run_id_for is documented as uuid5(namespace, "<job_id>|<µs since epoch>"); its fast path
    must give exactly that, for any zone, far past and future, and any job id text."""
    rng = random.Random(7)
    zones = [UTC, ZoneInfo("America/New_York"), ZoneInfo("Asia/Kathmandu")]
    ids = ["j", "steady-12345", "ünïcødé/任务", "a|b", ""]
    for n in range(2000):
        micros = rng.randrange(-(10**16), 10**17)
        instant = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)).astimezone(
            rng.choice(zones)
        )
        job_id = rng.choice(ids) + str(n)
        expected = uuid.uuid5(RUN_ID_NAMESPACE, f"{job_id}|{micros}")
        got = run_id_for(job_id, instant)
        assert got == expected and got.version == 5 and str(got) == str(expected)
        assert hash(got) == hash(expected) and got.bytes == expected.bytes
