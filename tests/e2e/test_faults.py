"""Fault injection on the whole pipeline (docs/operations.md, "Tests"), checked against the
invariants (tests/e2e/invariants.py) by SQL over the database and by the recording target.

- F2: a worker paused (``kill -STOP``) for longer than its lease. The reaper expires attempt 1 by
  the database clock, another worker runs attempt 2, and when the zombie resumes it must not win:
  either it fences itself (its local lease deadline passed while it was stopped: ``lease.lost``)
  or the database rejects its completion (a row in ``run_fenced_completions``). I3, I8.
- F8: the broker is killed and restarted on the same port, losing every topic, record and
  committed offset (tansu keeps them in memory only). PostgreSQL is the source of truth: runs the
  broker lost are re-published by the planner's sweeper, so every occurrence still gets exactly
  one run record and every run still executes (late, at least once). I1, I2, I7.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from duetime.schedule import ScheduleSpec, compile_schedule
from duetime_infra import KafkaBroker
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import PUBLICATION_GRACE
from tests.fixtures.target import RecordingTarget

from .pipeline import TERMINAL, Pipeline, e2e_job, pipeline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

# The planner's sweeper (PlannerConfig): runs published but unclaimed this long after their due
# time are published again, checked this often.
SWEEP_GRACE = timedelta(seconds=30)
SWEEP_INTERVAL = timedelta(seconds=5)


def _first(rows: list[Any]) -> Any:
    return rows[0] if rows else None


def test_f2_worker_paused_longer_than_its_lease_cannot_complete(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    # The target answers attempt 1 after 2 s, while its worker is stopped: when the worker is
    # continued, the answer is waiting in its socket and its local lease deadline has passed.
    path = "/slow-once-2/zombie"
    pipeline.apply(
        [
            e2e_job(
                "zombie",
                f"{http_target.url}{path}",
                schedule={"at": "2000-01-01T00:00:00Z"},
                lease_seconds=3,
                heartbeat_seconds=1,
                retry={"max_attempts": 3, "initial_interval_seconds": 0.5},
            )
        ]
    )
    arrived = http_target.wait_for(path, 1, timeout=60)
    assert arrived, pipeline.logs()
    assert arrived[0].headers["X-Duetime-Attempt"] == "1"
    run_id = arrived[0].headers["X-Duetime-Run-Id"]

    pipeline.pause("worker")  # attempt 1 is executing: the worker stalls mid-call
    paused_at = time.monotonic()
    try:
        pipeline.start("worker", instance="worker-2")
        # The reaper ends attempt 1 by the database clock while its worker is stopped ...
        pipeline.wait_until(
            "the reaper to expire attempt 1",
            lambda: _first(
                pipeline.sql(
                    "SELECT 1 AS ok FROM run_attempts WHERE run_id = :r AND attempt = 1 "
                    "AND outcome = 'lease_expired'",
                    r=run_id,
                )
            ),
            timeout=30,
        )
        # ... and the second worker (once the group has dropped the stopped one) runs attempt 2.
        pipeline.wait_until(
            "attempt 2 to succeed on the second worker",
            lambda: _first(
                pipeline.sql(
                    "SELECT 1 AS ok FROM run_attempts WHERE run_id = :r AND attempt = 2 "
                    "AND outcome = 'succeeded'",
                    r=run_id,
                )
            ),
            timeout=60,
        )
    finally:
        stalled = time.monotonic() - paused_at
        pipeline.resume("worker")
    assert stalled > 3  # longer than the lease: the scenario really produced a zombie

    # The zombie resumes with the target's answer to attempt 1 in hand. Whatever it does, its
    # attempt must not be accepted: it fences itself, or the database rejects its completion.
    def zombie_stopped() -> str | None:
        if pipeline.sql(
            "SELECT 1 FROM run_fenced_completions WHERE run_id = :r AND attempt = 1", r=run_id
        ):
            return "completion rejected"
        log = pipeline.log_text("worker")
        if any(
            "lease.lost" in line and run_id in line and "attempt=1" in line
            for line in log.splitlines()
        ):
            return "self-fenced"
        return None

    how = pipeline.wait_until("the zombie to give up attempt 1", zombie_stopped, timeout=30)

    run = pipeline.sql("SELECT * FROM runs WHERE run_id = :r", r=run_id)[0]
    assert (run.state, run.attempt) == ("succeeded", 2)
    attempts = pipeline.sql(
        "SELECT attempt, outcome, worker, lease_token FROM run_attempts WHERE run_id = :r "
        "ORDER BY attempt",
        r=run_id,
    )
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_expired"), (2, "succeeded")]
    assert attempts[0].worker != attempts[1].worker
    assert run.worker == attempts[1].worker
    # I3: nothing from attempt 1 was accepted. The only accepted completion is attempt 2's
    # (run_attempts.outcome 'succeeded'/'failed' is written only by an accepted completion), and
    # every rejected completion is the zombie's, with its own (stale) lease token.
    accepted = [a.attempt for a in attempts if a.outcome in ("succeeded", "failed")]
    assert accepted == [2]
    fenced = pipeline.sql(
        "SELECT attempt, worker, lease_token FROM run_fenced_completions WHERE run_id = :r",
        r=run_id,
    )
    assert all(
        (f.attempt, f.worker, f.lease_token) == (1, attempts[0].worker, attempts[0].lease_token)
        for f in fenced
    ), fenced
    if how == "completion rejected":
        assert len(fenced) == 1
        pipeline.wait_until(
            "the zombie to log its rejected completion",
            lambda: "run.completion_fenced" in pipeline.log_text("worker"),
            timeout=10,
        )
    else:
        assert not fenced
    # I8: the target saw both attempts, each with its own idempotency key; the zombie did not
    # call it again after resuming.
    keys = [r.headers["Idempotency-Key"] for r in http_target.matching(path)]
    assert keys == [f"{run_id}:1", f"{run_id}:2"]
    for request in http_target.matching(path):
        assert request.headers["X-Duetime-Run-Id"] == run_id
    # The successor carries the higher fencing token: a target keeping the highest it has seen
    # rejects whatever the zombie sends from now on (docs/targets.md, "Fencing").
    tokens = [r.headers["X-Duetime-Fencing-Token"] for r in http_target.matching(path)]
    assert tokens == ["2", "4"]
    # The zombie lives on: it was dropped from the consumer group while stopped and joins it
    # again. (Waiting for that also keeps the teardown from closing it while a JoinGroup is
    # pending, which leaves the group stuck on the embedded broker.)
    pipeline.wait_until(
        "the resumed worker to rejoin its consumer group",
        lambda: _rejoined(pipeline.log_text("worker")),
        timeout=60,
    )


def _rejoined(log: str) -> bool:
    """The worker lost or gave up its partitions at least once, and was assigned some after."""
    # A line is "<time> <level> <logger> <event> key=value ...".
    names = [fields[3] for fields in map(str.split, log.splitlines()) if len(fields) > 3]
    events = [name for name in names if name.startswith("consumer.")]
    gone = [i for i, name in enumerate(events) if name in ("consumer.lost", "consumer.revoked")]
    return bool(gone) and "consumer.assigned" in events[gone[-1] + 1 :]


def test_f8_broker_restart_that_loses_its_log(
    database_url: str, http_target: RecordingTarget, tmp_path: Path
) -> None:
    # A private broker: killing the session's broker would wipe the topics of every other test
    # on this xdist worker.
    with contextlib.ExitStack() as cleanup:
        broker = KafkaBroker(tmp_path / "broker")
        cleanup.callback(broker.stop)
        broker.start()
        pipe = Pipeline(database_url, broker.url, tmp_path)
        # The dispatcher holds every run until its due instant, so the broker's lost log loses
        # runs and the sweeper must bring them back (what this scenario proves). With claims
        # ahead (the default for HTTP targets) a worker has claimed each run in PostgreSQL 5 s
        # before it is due, out of the broker's reach, and the lost log loses little or nothing.
        pipe.env["DUETIME_DISPATCHER_CLAIM_AHEAD"] = "0"
        cleanup.callback(pipe.stop_all)
        _broker_restart_scenario(pipe, broker, http_target)


def _broker_restart_scenario(
    pipe: Pipeline, broker: KafkaBroker, http_target: RecordingTarget
) -> None:
    pipe.start_all()
    path = "/ok/f8"
    pipe.apply([e2e_job("f8", f"{http_target.url}{path}")])
    pipe.wait_until(
        "the first run to succeed",
        lambda: _first(
            pipe.sql("SELECT 1 AS ok FROM runs WHERE job_id = 'f8' AND state='succeeded'")
        ),
        timeout=60,
    )
    time.sleep(8)  # let the schedule run before the fault

    # F8: SIGKILL (tansu ignores SIGTERM) and a restart on the same port, with empty memory.
    broker.kill()
    broker.start()
    healed_at: datetime = pipe.sql("SELECT now() AS now")[0].now

    time.sleep(15)  # let the schedule run on after the fault
    pipe.sql("UPDATE jobs SET paused = true WHERE job_id = 'f8'")
    bounds = pipe.sql(
        "SELECT min(scheduled_for) AS first, max(scheduled_for) AS last FROM runs "
        "WHERE job_id = 'f8'"
    )[0]

    # I2: every run ends. A run the broker lost (held by the dispatcher, or on runs.ready)
    # is re-published by the sweeper SWEEP_GRACE after it was due.
    def unfinished() -> list[Any]:
        return pipe.sql(
            "SELECT run_id, scheduled_for, state, attempt, published_at FROM runs "
            "WHERE job_id = 'f8' AND state <> ALL(:t) ORDER BY scheduled_for",
            t=list(TERMINAL),
        )

    bound = (SWEEP_GRACE + SWEEP_INTERVAL + timedelta(seconds=20)).total_seconds()
    pipe.wait_until("every run to finish", lambda: not unfinished(), timeout=bound)
    finished_at: datetime = pipe.sql("SELECT now() AS now")[0].now

    runs = pipe.sql(
        "SELECT run_id, scheduled_for, due_at, state, attempt, started_at, finished_at, "
        "published_at FROM runs WHERE job_id = 'f8' ORDER BY scheduled_for"
    )
    # I1: exactly one run per occurrence between the first and the last, none missing.
    schedule = compile_schedule(ScheduleSpec(kind="interval", expression="PT2S"))
    expected = [bounds.first]
    while expected[-1] < bounds.last:
        nxt = schedule.next_after(expected[-1])
        assert nxt is not None
        expected.append(nxt)
    assert [r.scheduled_for for r in runs] == expected
    assert len(runs) >= 10  # about 25 s of a 2 s interval
    assert any(r.scheduled_for < healed_at for r in runs)
    assert any(r.scheduled_for > healed_at + timedelta(seconds=5) for r in runs)
    # At least once: every run, including those due around the restart, was executed and
    # reached the target with its idempotency key. No retries were needed (the target is
    # healthy); a run re-published by the sweeper is claimed once, its copies skip.
    assert all(r.state == "succeeded" and r.attempt == 1 for r in runs), runs
    keys = {request.headers["Idempotency-Key"] for request in http_target.matching(path)}
    assert {f"{r.run_id}:1" for r in runs} <= keys
    # I7: nothing is left in the outbox: every run was published (acknowledged) and claimed.
    assert all(r.published_at is not None for r in runs)
    # ... and no mark is still provisional past the time a planner has to settle it.
    settle_within = PlannerConfig().publish_timeout + PUBLICATION_GRACE + timedelta(seconds=5)
    assert not pipe.sql(
        "SELECT 1 FROM run_publications WHERE created_at < now() - make_interval(secs => :s)",
        s=settle_within.total_seconds(),
    )
    assert not pipe.sql("SELECT 1 FROM runs WHERE job_id = 'f8' AND state = 'scheduled'")
    # Late but executed: the runs the dispatcher held when the broker died were dropped with
    # their partitions (their records were gone) and came back only through the sweeper, at
    # least SWEEP_GRACE after they were due; that proves the scenario lost something. No run
    # started later than the sweeper's bound.
    late_bound = SWEEP_GRACE + SWEEP_INTERVAL + timedelta(seconds=10)
    late = {r.scheduled_for: r.started_at - r.due_at for r in runs}
    assert all(delay < late_bound for delay in late.values()), late
    assert any(delay >= SWEEP_GRACE for delay in late.values()), late
    assert "runs.swept" in pipe.log_text("planner")
    assert finished_at - healed_at < timedelta(seconds=90)
