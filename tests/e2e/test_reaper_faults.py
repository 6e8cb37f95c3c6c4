"""Fault injection on the reaper, checked by SQL afterwards.

A reaper killed (``kill -9``) while attempts run, and restarted after their leases ran out:

1. *From the stream.* The workers' heartbeats of those attempts are still on ``runs.heartbeats``
   past the killed reaper's committed offsets (a heartbeat stays uncommitted while it backs a
   watched attempt), so the restarted reaper reads them again and expires the attempts, with the
   safety-net scan switched off: every expiry of this phase says ``source=stream``.
2. *From the scan.* An attempt the stream never showed (claimed in the database, announced
   nowhere, as when a broker loses its log) is expired by the next reaper's scan.

Afterwards: every run is terminal (I2), no attempt beyond ``max_attempts`` (I5), and no completion
of a fenced attempt was accepted, while the scenario did produce a zombie (I3).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from duetime.bus.kafka import consumer_config, message_headers
from duetime.bus.records import RUN_HEARTBEATS
from duetime.bus.topics import TopicCatalog
from duetime.model import run_id_for
from duetime.store import ClaimRequest, NewRun
from duetime.store.attempts import claim_batch
from tests.fixtures.target import RecordingTarget

from .invariants import check_runs
from .pipeline import Pipeline, e2e_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

RUNS = 3
JOBS = [f"reaper-kill-{n}" for n in range(RUNS)]
# The first request of each run is answered after 8 s: attempt 1 is still executing when its
# worker is stopped, and the answer waits in the stopped worker's socket.
SLOW = "/slow-once-8/reaper-kill"


def test_a_reaper_killed_and_restarted_resumes_expiry_from_the_stream_and_the_scan(
    database_url: str, stack: Any, http_target: RecordingTarget, tmp_path: Path
) -> None:
    pipe = Pipeline(database_url, stack.kafka_bootstrap, tmp_path)
    pipe.env["DUETIME_REAPER_SCAN_INTERVAL"] = "3600"  # phase 1: the stream alone
    try:
        pipe.start_all()
        run_ids = _from_the_stream(pipe, http_target)
        orphan = _from_the_scan(pipe, http_target)
        _check_invariants(pipe, [*run_ids, orphan])
    finally:
        pipe.stop_all()


def _from_the_stream(pipe: Pipeline, http_target: RecordingTarget) -> list[str]:
    pipe.apply(
        [
            e2e_job(
                job_id,
                f"{http_target.url}{SLOW}",
                schedule={"at": "2000-01-01T00:00:00Z"},
                lease_seconds=3,
                heartbeat_seconds=1,
                retry={"max_attempts": 3, "initial_interval_seconds": 0.5},
            )
            for job_id in JOBS
        ]
    )
    first = http_target.wait_for(SLOW, RUNS, timeout=60)
    assert len(first) == RUNS, pipe.logs()
    run_ids = sorted({r.headers["X-Duetime-Run-Id"] for r in first})
    assert len(run_ids) == RUNS
    # Their leases are on the stream (a worker announces each lease when it claims it).
    pipe.wait_until(
        "every attempt's heartbeat on the stream", lambda: _announced(pipe, run_ids), 10
    )

    pipe.kill("reaper")
    pipe.pause("worker")  # the attempts stall mid-call: a zombie for each run
    try:
        pipe.start("worker", instance="worker-2")
        # No reaper: the leases run out in the database and nothing ends the attempts.
        pipe.wait_until(
            "every lease to run out while no reaper runs",
            lambda: (
                len(
                    pipe.sql(
                        "SELECT 1 FROM runs WHERE run_id = ANY(:r) AND state = 'running' "
                        "AND attempt = 1 AND lease_expires_at < now()",
                        r=_ids(run_ids),
                    )
                )
                == RUNS
            ),
            timeout=20,
        )
        pipe.start("reaper", instance="reaper-2")
        pipe.wait_until(
            "attempt 2 of every run to succeed on the second worker",
            lambda: (
                len(
                    pipe.sql(
                        "SELECT 1 FROM runs WHERE run_id = ANY(:r) AND state = 'succeeded' "
                        "AND attempt = 2",
                        r=_ids(run_ids),
                    )
                )
                == RUNS
            ),
            timeout=90,
        )
    finally:
        pipe.resume("worker")

    # The restarted reaper found every expiry on the stream (its scan never ran).
    expiries = _expiries(pipe.log_text("reaper-2"))
    assert sorted(run for run, _attempt, _source in expiries) == run_ids, expiries
    assert {(attempt, source) for _run, attempt, source in expiries} == {("1", "stream")}

    # Each zombie gives up attempt 1: it fences itself, or its completion is rejected.
    def zombies_stopped() -> bool:
        fenced = {
            str(r.run_id)
            for r in pipe.sql(
                "SELECT run_id FROM run_fenced_completions WHERE run_id = ANY(:r)", r=_ids(run_ids)
            )
        }
        lost = {
            run
            for run in run_ids
            for line in pipe.log_text("worker").splitlines()
            if "lease.lost" in line and run in line and "attempt=1" in line
        }
        return fenced | lost == set(run_ids)

    pipe.wait_until("every zombie to give up attempt 1", zombies_stopped, timeout=30)
    return run_ids


def _from_the_scan(pipe: Pipeline, http_target: RecordingTarget) -> str:
    """An attempt nobody announced: only a scan can find it."""
    pipe.kill("reaper-2")
    pipe.apply(
        [
            e2e_job(
                "reaper-orphan",
                f"{http_target.url}/ok/reaper-orphan",
                schedule={"at": "2100-01-01T00:00:00Z"},  # the test makes its run itself
                retry={"max_attempts": 2, "initial_interval_seconds": 0.5},
            )
        ]
    )
    scheduled_for = datetime.now(UTC).replace(microsecond=0)
    run_id = run_id_for("reaper-orphan", scheduled_for)
    # Inserted and claimed in one transaction (the planner never sees it unclaimed), by a
    # worker that vanished before announcing anything.
    with pipe.store.tx() as tx:
        tx.runs_ensure_partition(scheduled_for.date())
        tx.runs_insert(
            [NewRun(run_id, "reaper-orphan", "e2e", "e2e-target", scheduled_for, scheduled_for, 2)]
        )
        request = ClaimRequest(run_id, scheduled_for, 1, uuid.uuid4(), timedelta(milliseconds=500))
        assert claim_batch(tx.conn, "vanished-worker", [request])
    pipe.env["DUETIME_REAPER_SCAN_INTERVAL"] = "2"
    pipe.start("reaper", instance="reaper-3")
    pipe.wait_until(
        "the orphan's retry to succeed",
        lambda: pipe.sql(
            "SELECT 1 FROM runs WHERE run_id = :r AND state = 'succeeded' AND attempt = 2",
            r=run_id,
        ),
        timeout=60,
    )
    assert _expiries(pipe.log_text("reaper-3")) == [(str(run_id), "1", "scan")]
    assert [r.headers["X-Duetime-Attempt"] for r in http_target.matching("/ok/reaper-orphan")] == [
        "2"
    ]
    return str(run_id)


def _check_invariants(pipe: Pipeline, run_ids: list[str]) -> None:
    runs = check_runs(pipe, run_ids)  # I2, I5, I3
    # Each run: attempt 1 expired (the reaper ended it), attempt 2 succeeded.
    for run in runs:
        attempts = pipe.sql(
            "SELECT attempt, outcome FROM run_attempts WHERE run_id = :r ORDER BY attempt",
            r=run.run_id,
        )
        assert [(a.attempt, a.outcome) for a in attempts] == [
            (1, "lease_expired"),
            (2, "succeeded"),
        ]


def _ids(run_ids: list[str]) -> list[uuid.UUID]:
    return [uuid.UUID(run) for run in run_ids]


def _announced(pipe: Pipeline, run_ids: list[str]) -> bool:
    """Every run's attempt 1 has a heartbeat on runs.heartbeats (read outside any group)."""
    catalog = TopicCatalog(pipe.prefix)
    consumer = Consumer(consumer_config(pipe.settings, f"probe-{uuid.uuid4().hex}"))
    try:
        consumer.assign(
            [TopicPartition(catalog.heartbeats, p, 0) for p in range(catalog.partitions)]
        )
        seen: set[str] = set()
        for message in consumer.consume(1000, 2.0):
            if message.error() is None:
                beat = RUN_HEARTBEATS.decode(message.value(), message_headers(message))
                if beat.attempt == 1:
                    seen.add(str(beat.run_id))
        return set(run_ids) <= seen
    finally:
        consumer.close()


def _expiries(log: str) -> list[tuple[str, str, str]]:
    """(run_id, attempt, source) of every ``lease.expired`` line of a reaper's log."""
    out = []
    for line in log.splitlines():
        if " lease.expired " not in line:
            continue
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        out.append((fields["run_id"], fields["attempt"], fields["source"]))
    return out
