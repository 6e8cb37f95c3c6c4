"""The occurrence ledger on the real stack: "did my job run, and if not, why?" always answered.

The planner records what a catch-up policy leaves out after an outage, in the planning
transaction; a resume records the pause; ``duetime runs list --all-occurrences`` puts every
occurrence beside its run or its reason.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from duetime.bus.topics import TopicCatalog
from duetime.cli.main import main
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner

pytestmark = pytest.mark.integration
TEN_MINUTES = timedelta(minutes=10)


def _every_ten_minutes(store: Store, job_id: str, catch_up: str, hours_ago: int) -> datetime:
    """A job created a day ago whose next occurrence was ``hours_ago`` hours ago (an outage);
    returns that occurrence."""
    job = parse_job(
        {
            "id": job_id,
            "schedule": {"cron": "*/10 * * * *"},
            "catch_up": catch_up,
            "target": {"http": {"url": "https://example.com/hook"}},
        }
    )
    with store.tx() as tx:
        jobs_apply(tx, [job])
    with store.engine.begin() as conn:
        return conn.execute(
            text(
                "UPDATE jobs SET created_at = now() - interval '1 day', next_run_at = "
                "date_trunc('hour', now()) - make_interval(hours => :h) "
                "WHERE job_id = :j RETURNING next_run_at"
            ),
            {"h": hours_ago, "j": job_id},
        ).scalar_one()


def _ledger(capsys: pytest.CaptureFixture[str], job_id: str, since: datetime) -> list[Any]:
    until = since + timedelta(hours=5)  # past the next hour, whatever the minute now
    args = ["runs", "list", "--job", job_id, "--all-occurrences", "--json"]
    assert main([*args, "--since", since.isoformat(), "--until", until.isoformat()]) == 0
    lines: list[Any] = json.loads(capsys.readouterr().out)
    return lines


def test_what_catch_up_left_out_after_an_outage_is_in_the_ledger(
    env: tuple[Settings, Store, Producer], cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, store, producer = env
    outage_from = _every_ten_minutes(store, "ten-minutes", "once", hours_ago=3)
    planner = Planner(
        store, producer, TopicCatalog(settings.topic_prefix), PlannerConfig(lookahead=TEN_MINUTES)
    )
    planner.ensure_partitions(outage_from.date())
    planner.run_once()
    with store.engine.begin() as conn:
        gap = conn.execute(text("SELECT * FROM occurrence_gaps")).one()
        ran = conn.execute(text("SELECT min(scheduled_for) FROM runs")).scalar_one()
    assert (gap.job_id, gap.first_at, gap.end_at) == ("ten-minutes", outage_from, ran)
    assert (gap.reason, gap.policy) == ("catch_up", "once")
    lines = _ledger(capsys, "ten-minutes", outage_from)
    by_status: dict[str, list[Any]] = {}
    for line in lines:
        by_status.setdefault(line["status"], []).append(line)
    skipped = by_status["skipped"]
    # Every occurrence of the outage but the newest missed one: left out by "once", and said so.
    assert len(skipped) >= 3 * 6 - 1
    assert all(
        line["reason"].startswith("catch_up:") and "(once)" in line["reason"] for line in skipped
    )
    assert min(line["scheduled_for"] for line in skipped) == outage_from.isoformat().replace(
        "+00:00", "Z"
    )
    # The newest missed occurrence and the on-time ones have runs; the rest is upcoming.
    assert by_status["scheduled"] and all(line["run_id"] for line in by_status["scheduled"])
    counts = {status: len(lines) for status, lines in by_status.items()}
    assert "missed" not in by_status and "upcoming" in by_status, counts
    # Planning again records nothing twice.
    planner.run_once()
    with store.engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM occurrence_gaps")).scalar_one() == 1


def test_a_pause_is_in_the_ledger(
    env: tuple[Settings, Store, Producer], cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _settings, store, _producer = env
    held_from = _every_ten_minutes(store, "paused-job", "all", hours_ago=2)
    assert main(["jobs", "pause", "paused-job"]) == 0
    assert main(["jobs", "resume", "paused-job"]) == 0
    capsys.readouterr()
    with store.engine.begin() as conn:
        gap = conn.execute(text("SELECT * FROM occurrence_gaps")).one()
        resumed_at = conn.execute(text("SELECT next_run_at FROM jobs")).scalar_one()
    assert (gap.first_at, gap.end_at, gap.reason) == (held_from, resumed_at, "paused")
    lines = _ledger(capsys, "paused-job", held_from)
    paused = [line for line in lines if line["status"] == "skipped"]
    assert len(paused) >= 2 * 6 and all(line["reason"].startswith("paused:") for line in paused)
    assert {line["status"] for line in lines} <= {"skipped", "upcoming"}
