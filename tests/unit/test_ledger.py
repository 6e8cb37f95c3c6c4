"""The occurrence ledger: every occurrence in a range has a line that says what became of it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from duetime.ledger import archivable_days, occurrence_ledger, with_archived_runs
from duetime.schedule import ScheduleSpec, compile_schedule

HOURLY = compile_schedule(ScheduleSpec("cron", "0 * * * *"))
T = datetime(2026, 12, 3, tzinfo=UTC)
H = timedelta(hours=1)
RUN_ID = uuid.UUID(int=1)


@dataclass(frozen=True)
class Run:
    scheduled_for: datetime
    state: str
    last_error: str | None = None
    attempt: int = 1
    run_id: uuid.UUID = RUN_ID


@dataclass(frozen=True)
class Gap:
    first_at: datetime
    end_at: datetime
    reason: str
    policy: str | None = None


def _ledger(**kwargs: object) -> dict[datetime, tuple[str, str]]:
    args: dict[str, object] = {
        "since": T,
        "until": T + 10 * H,
        "now": T + 8 * H + timedelta(minutes=30),
        "created_at": T - H,
        "next_run_at": T + 9 * H,
        "paused": False,
        "runs": [],
        "gaps": [],
        "limit": 100,
    }
    args.update(kwargs)
    lines = occurrence_ledger(HOURLY, **args)  # type: ignore[arg-type]
    assert [line.scheduled_for for line in lines] == sorted(
        (line.scheduled_for for line in lines), reverse=True
    )
    return {line.scheduled_for: (line.status, line.reason) for line in lines}


def test_every_occurrence_has_an_answer() -> None:
    ledger = _ledger(
        runs=[
            Run(T, "succeeded"),
            Run(T + H, "dead", "HTTP 503"),
            Run(T + 2 * H, "skipped", "overlap"),
            Run(T + 8 * H, "running"),
        ],
        gaps=[Gap(T + 3 * H, T + 6 * H, "catch_up", "once")],
    )
    assert ledger[T] == ("succeeded", "")
    assert ledger[T + H] == ("dead", "HTTP 503")
    assert ledger[T + 2 * H] == ("skipped", "overlap")
    for hour in (3, 4, 5):  # the outage's occurrences the policy "once" left out
        status, reason = ledger[T + hour * H]
        assert status == "skipped" and reason.startswith("catch_up:") and "(once)" in reason
    assert ledger[T + 6 * H] == ("missed", "no run and no recorded reason")
    assert ledger[T + 7 * H][0] == "missed"
    assert ledger[T + 8 * H] == ("running", "")
    assert ledger[T + 9 * H] == ("upcoming", "")
    assert len(ledger) == 10


def test_a_paused_job_and_a_planner_that_is_behind() -> None:
    paused = _ledger(next_run_at=T + 5 * H, paused=True, gaps=[Gap(T, T + 2 * H, "paused")])
    assert paused[T][0] == "skipped" and paused[T][1].startswith("paused:")
    assert paused[T + 2 * H][0] == "missed"
    assert paused[T + 5 * H] == ("skipped", "paused: the job is paused")
    behind = _ledger(next_run_at=T + 7 * H)
    assert behind[T + 7 * H] == ("unplanned", "not planned yet: the planner is behind")
    assert behind[T + 9 * H] == ("upcoming", "")


def test_nothing_before_the_job_existed_and_runs_of_an_earlier_definition() -> None:
    ledger = _ledger(
        created_at=T + 7 * H + timedelta(minutes=1),
        runs=[Run(T + 7 * H + timedelta(minutes=30), "succeeded")],
    )
    assert sorted(ledger) == [T + 7 * H + timedelta(minutes=30), T + 8 * H, T + 9 * H]
    assert ledger[T + 7 * H + timedelta(minutes=30)] == ("succeeded", "earlier definition")


def test_the_newest_lines_up_to_the_limit() -> None:
    ledger = _ledger(limit=3)
    assert sorted(ledger) == [T + 7 * H, T + 8 * H, T + 9 * H]


def test_a_wall_time_the_dst_gap_skipped() -> None:
    """02:30 in Berlin does not exist on 2025-03-30; with dst_gap skip the job has no run then,
    and the ledger says why instead of leaving a hole."""
    berlin = compile_schedule(ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin", dst_gap="skip"))
    since = datetime(2025, 3, 28, tzinfo=UTC)
    lines = occurrence_ledger(
        berlin,
        since=since,
        until=since + timedelta(days=4),
        now=since + timedelta(days=5),
        created_at=since - timedelta(days=1),
        next_run_at=since + timedelta(days=6),
        paused=False,
        runs=[],
        gaps=[],
        limit=100,
    )
    skipped = [line for line in lines if line.status == "skipped"]
    assert len(skipped) == 1 and skipped[0].reason.startswith("dst_gap: 02:30 does not exist")
    assert skipped[0].scheduled_for == datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
    assert sum(line.status == "missed" for line in lines) == 3  # the 28th, 29th and 31st


def test_only_days_before_yesterday_can_have_been_archived() -> None:
    now = datetime(2026, 12, 10, 9, tzinfo=UTC)
    # The default range (the last day and the next hour): no object storage read.
    assert archivable_days(now - 24 * H, now + H, now) is None
    assert archivable_days(datetime(2026, 12, 8, 23, tzinfo=UTC), now, now) == (
        date(2026, 12, 8),
        date(2026, 12, 9),
    )
    # An end at midnight does not reach the day it starts.
    assert archivable_days(
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC), now
    ) == (
        date(2026, 12, 1),
        date(2026, 12, 3),
    )


def test_archived_runs_answer_for_their_occurrences_and_the_database_copy_wins() -> None:
    archived = [
        Run(T, "succeeded", run_id=uuid.UUID(int=10)),
        Run(T + H, "dead", "HTTP 503", run_id=uuid.UUID(int=11)),
        Run(T + 2 * H, "dead", run_id=uuid.UUID(int=12)),  # planned into again since
        Run(T - H, "succeeded", run_id=uuid.UUID(int=13)),  # outside the range
    ]
    live = [Run(T + 2 * H, "succeeded", run_id=uuid.UUID(int=20))]
    runs = with_archived_runs(live, archived, since=T, until=T + 10 * H)
    assert [run.run_id.int for run in runs] == [10, 11, 20]
    ledger = _ledger(runs=runs)
    assert ledger[T] == ("succeeded", "")
    assert ledger[T + H] == ("dead", "HTTP 503")
    assert ledger[T + 2 * H] == ("succeeded", "")
    assert ledger[T + 3 * H][0] == "missed"
