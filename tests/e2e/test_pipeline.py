"""The whole pipeline end to end: planner -> dispatcher -> worker -> reaper, as processes, on the
real PostgreSQL and broker. Checks the contract: one run per occurrence, idempotency keys at the
target, dead after max_attempts, and a killed worker's run retried to success."""

from __future__ import annotations

import json
import time

import pytest

from duetime.schedule import ScheduleSpec, compile_schedule
from tests.fixtures.target import RecordingTarget

from .pipeline import TERMINAL, Pipeline, e2e_job, pipeline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def test_interval_job_gets_exactly_one_run_per_occurrence(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    pipeline.apply([e2e_job("every-2s", f"{http_target.url}/ok/every-2s")])
    first = pipeline.wait_until(
        "the first run",
        lambda: (
            pipeline.sql("SELECT min(scheduled_for) AS ts FROM runs WHERE job_id='every-2s'")[0].ts
        ),
        timeout=30,
    )
    time.sleep(30)
    pipeline.sql("UPDATE jobs SET paused = true WHERE job_id = 'every-2s'")
    last = pipeline.sql("SELECT max(scheduled_for) AS ts FROM runs WHERE job_id='every-2s'")[0].ts

    def all_finished() -> bool:
        rows = pipeline.sql(
            "SELECT count(*) AS n FROM runs WHERE job_id='every-2s' AND state <> ALL(:t)",
            t=list(TERMINAL),
        )
        return rows[0].n == 0

    pipeline.wait_until("every run to finish", all_finished, timeout=30)

    runs = pipeline.sql(
        "SELECT run_id, scheduled_for, state, attempt FROM runs WHERE job_id='every-2s' "
        "ORDER BY scheduled_for"
    )
    # The expected occurrences from the schedule itself, between the first and the last run.
    schedule = compile_schedule(ScheduleSpec(kind="interval", expression="PT2S"))
    expected = [first]
    while expected[-1] < last:
        nxt = schedule.next_after(expected[-1])
        assert nxt is not None
        expected.append(nxt)
    assert [r.scheduled_for for r in runs] == expected  # none missing, none twice
    assert len(runs) >= 14  # about 30 s of a 2 s interval
    assert all(r.state == "succeeded" and r.attempt == 1 for r in runs)
    # The target saw every run, each with its idempotency key.
    keys = {r.headers.get("Idempotency-Key") for r in http_target.matching("/ok/every-2s")}
    assert {f"{r.run_id}:1" for r in runs} <= keys
    for request in http_target.matching("/ok/every-2s"):
        run_id, attempt = request.headers["Idempotency-Key"].split(":")
        assert request.headers["X-Duetime-Run-Id"] == run_id
        assert request.headers["X-Duetime-Attempt"] == attempt


def test_always_failing_target_goes_dead_after_max_attempts(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    # The tenant's alert webhook: the reaper service delivers the dead run's alert there.
    pipeline.sql(
        "INSERT INTO tenants (tenant, alert_webhook) VALUES ('e2e', :u)",
        u=f"{http_target.url}/ok/alerts",
    )
    pipeline.apply(
        [
            e2e_job(
                "always-fails",
                f"{http_target.url}/fail/x",
                schedule={"at": "2000-01-01T00:00:00Z"},
                retry={"max_attempts": 3, "initial_interval_seconds": 0.2, "multiplier": 2},
            )
        ]
    )
    run = pipeline.wait_until(
        "the run to go dead",
        lambda: next(
            iter(pipeline.sql("SELECT * FROM runs WHERE job_id='always-fails' AND state='dead'")),
            None,
        ),
        timeout=60,
    )
    assert run.attempt == 3
    attempts = pipeline.sql(
        "SELECT attempt, outcome, status_code FROM run_attempts WHERE run_id=:r ORDER BY attempt",
        r=run.run_id,
    )
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [
        (1, "failed", 500),
        (2, "failed", 500),
        (3, "failed", 500),
    ]
    assert len(http_target.matching("/fail/x")) == 3
    # Each retry, published again by the planner's outbox, reaches the target with a higher
    # fencing token than the attempt before it.
    tokens = [r.headers["X-Duetime-Fencing-Token"] for r in http_target.matching("/fail/x")]
    assert tokens == ["2", "4", "6"]
    # The reaper published it on the dead topic and raised the alert.
    pipeline.wait_until(
        "the dead record",
        lambda: (
            pipeline.sql("SELECT dead_published_at FROM runs WHERE run_id=:r", r=run.run_id)[
                0
            ].dead_published_at
        ),
        timeout=30,
    )
    [alert] = http_target.wait_for("/ok/alerts", 1, timeout=30)
    body = json.loads(alert.body)
    assert (body["kind"], body["subject"], body["tenant"]) == ("run.dead", str(run.run_id), "e2e")
    assert body["details"]["attempts"] == 3


def test_worker_killed_mid_run_is_retried_and_succeeds(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    pipeline.apply(
        [
            e2e_job(
                "killed-worker",
                f"{http_target.url}/slow-first/x",
                schedule={"at": "2000-01-01T00:00:00Z"},
                lease_seconds=3,
                heartbeat_seconds=1,
                retry={"max_attempts": 3, "initial_interval_seconds": 0.5},
            )
        ]
    )
    first = http_target.wait_for("/slow-first/x", 1, timeout=60)
    assert first, pipeline.logs()
    assert first[0].headers["X-Duetime-Attempt"] == "1"
    pipeline.kill("worker")  # kill -9 while the attempt executes
    pipeline.start("worker")
    run = pipeline.wait_until(
        "the retried run to succeed",
        lambda: next(
            iter(
                pipeline.sql(
                    "SELECT * FROM runs WHERE job_id='killed-worker' AND state='succeeded'"
                )
            ),
            None,
        ),
        timeout=60,
    )
    assert run.attempt == 2
    attempts = pipeline.sql(
        "SELECT attempt, outcome FROM run_attempts WHERE run_id=:r ORDER BY attempt", r=run.run_id
    )
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_expired"), (2, "succeeded")]
    keys = [r.headers["Idempotency-Key"] for r in http_target.matching("/slow-first/x")]
    assert keys == [f"{run.run_id}:1", f"{run.run_id}:2"]
    assert run.created_at <= run.finished_at
