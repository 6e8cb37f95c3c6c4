"""Fault injection on PostgreSQL (a crash), checked by SQL afterwards.

PostgreSQL killed (``kill -9``, a crash) and started again while jobs run every second through the
whole pipeline. No service may exit: each rides out the outage (its statements fail, are retried,
and its pool reconnects) and carries on by itself once the database is back. Afterwards, by SQL
and at the recording target:

- I1: one run per occurrence, none missing, between the first and the last (``catch_up: all``,
  so the occurrences missed while the database was down are planned late, not skipped);
- I2: every run terminal; new occurrences after the restart succeed;
- I5, I3: no attempt beyond ``max_attempts``, no accepted completion from a fenced attempt;
- I8: at-least-once at the target: a run reached it more than once only with different attempts.

The test has a PostgreSQL of its own: restarting the session's would break every other test.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from duetime.schedule import ScheduleSpec, compile_schedule
from duetime_infra import EmbeddedStack
from tests.fixtures.target import RecordingTarget

from .invariants import check_runs
from .pipeline import TERMINAL, Pipeline, e2e_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

JOBS = [f"pg-restart-{n}" for n in range(3)]
PATH = "/ok/pg-restart"
OUTAGE_SECONDS = 4


def test_postgres_restarted_under_load_services_recover_and_nothing_is_lost_or_doubled(
    stack: Any, http_target: RecordingTarget, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as cleanup:
        pg = EmbeddedStack(
            # Durable: a crash must not lose committed transactions (with synchronous_commit off
            # a killed server forgets its last commits, and a claimed attempt runs twice).
            tmp_path / "pg",
            components=("postgres",),
            durable=True,
            die_with_owner=True,
        )
        cleanup.callback(pg.down)
        urls = pg.up()  # migrated
        pipe = Pipeline(urls.database_url, stack.kafka_bootstrap, tmp_path)
        cleanup.callback(pipe.stop_all)
        _scenario(pipe, pg, http_target)


def _scenario(pipe: Pipeline, pg: EmbeddedStack, http_target: RecordingTarget) -> None:
    pipe.start_all()
    pipe.apply(
        [
            e2e_job(
                job,
                f"{http_target.url}{PATH}/{job}",
                schedule={"interval": "PT1S"},
                catch_up="all",
                lease_seconds=10,
                heartbeat_seconds=2,
                retry={"max_attempts": 5, "initial_interval_seconds": 1},
            )
            for job in JOBS
        ]
    )
    pipe.wait_until(
        "runs to succeed before the fault",
        lambda: len(pipe.sql("SELECT 1 FROM runs WHERE state = 'succeeded'")) >= 3 * len(JOBS),
        timeout=90,
    )
    time.sleep(3)  # under load: runs are being claimed and completed when the database dies

    pipe.store.engine.dispose()  # the test's own connections die with the server
    pg.postgres.kill()
    time.sleep(OUTAGE_SECONDS)
    pg.postgres.start()
    healed_at: datetime = pipe.sql("SELECT now() AS now")[0].now

    # Every service rode it out by itself (wait_until fails if any process exited) and new
    # occurrences run again.
    def recovered() -> bool:
        rows = pipe.sql(
            "SELECT DISTINCT job_id FROM runs WHERE state = 'succeeded' AND scheduled_for > :t",
            t=healed_at + timedelta(seconds=5),
        )
        return len(rows) == len(JOBS)

    pipe.wait_until("new occurrences to succeed after the restart", recovered, timeout=120)
    time.sleep(3)
    pipe.sql("UPDATE jobs SET paused = true WHERE job_id = ANY(:j)", j=JOBS)

    def unfinished() -> list[Any]:
        return pipe.sql(
            "SELECT run_id, job_id, scheduled_for, state, attempt FROM runs "
            "WHERE state <> ALL(:t) ORDER BY scheduled_for",
            t=list(TERMINAL),
        )

    # I2 within lease + the reaper's scan + backoff and some slack for a loaded machine.
    pipe.wait_until("every run to finish", lambda: not unfinished(), timeout=120)
    for name, process in pipe.processes.items():
        assert process.poll() is None, f"{name} exited\n{pipe.logs()}"
    # The outage was felt: the rounds of the planner and the reaper failed while it lasted.
    assert "planner.round_failed" in pipe.log_text("planner")
    assert "reaper.round_failed" in pipe.log_text("reaper")

    runs = pipe.sql(
        "SELECT run_id, job_id, scheduled_for, state, attempt FROM runs "
        "ORDER BY job_id, scheduled_for"
    )
    check_runs(pipe, [r.run_id for r in runs])  # I2, I5, I3
    schedule = compile_schedule(ScheduleSpec(kind="interval", expression="PT1S"))
    for job in JOBS:
        slots = [r.scheduled_for for r in runs if r.job_id == job]
        # I1: one run per occurrence from the first to the last, across the outage.
        expected = [slots[0]]
        while expected[-1] < slots[-1]:
            nxt = schedule.next_after(expected[-1])
            assert nxt is not None
            expected.append(nxt)
        assert slots == expected, job
        assert slots[0] < healed_at - timedelta(seconds=OUTAGE_SECONDS)
        assert slots[-1] > healed_at + timedelta(seconds=5)
    assert all(r.state == "succeeded" for r in runs), [r for r in runs if r.state != "succeeded"]
    # I8: every run reached the target, and a run reached it twice only with another attempt.
    keys = Counter(r.headers["Idempotency-Key"] for r in http_target.matching(PATH))
    assert not [key for key, seen in keys.items() if seen > 1], keys
    assert {f"{r.run_id}:{r.attempt}" for r in runs} <= set(keys)
