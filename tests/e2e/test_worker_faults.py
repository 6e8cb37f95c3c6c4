"""Fault injection on the workers, checked by SQL afterwards.

SIGTERM to the worker process whose attempt is executing: it takes no more work, gives the
attempt its ``shutdown_grace``, then hands it back (docs/workers.md, "Stopping"): the attempt ends
as ``handed_back`` and the run is due again at once, so the group's other process (or the one its
supervisor starts in its place) retries it long before the attempt's lease would have lapsed.
The lease and the retry backoff here are far longer than the whole scenario, so a retry that
waited for either would never come in time.

A worker cut off from PostgreSQL and from the broker by TCP proxies that go silent (``blackhole``)
while its attempt executes: it cannot renew the lease nor learn that it is gone, so it cancels the
call by its own clock within the lease (self-fencing) and completes nothing; the reaper expires the
attempt by the database clock and another worker retries the run while the first is still cut
off; once the cut heals, the first worker's held statements and records arrive late and change
nothing, and it goes back to work by itself. I2, I5, I3, I8.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from duetime_infra import KafkaBroker
from duetime_infra.ports import find_free_port
from tests.fixtures.proxy import TcpProxy
from tests.fixtures.target import RecordingTarget

from .invariants import check_runs
from .pipeline import Pipeline, e2e_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

LEASE = timedelta(seconds=120)
GRACE_SECONDS = 2
# The first request of the run is answered after 600 s (the call's timeout is longer): attempt 1
# is still executing when SIGTERM comes, however slowly the services start on this machine.
SLOW = "/slow-once-600/hand-back"


def test_sigterm_hands_the_in_flight_run_back_and_it_is_retried_at_once(
    database_url: str, stack: Any, http_target: RecordingTarget, tmp_path: Path
) -> None:
    pipe = Pipeline(database_url, stack.kafka_bootstrap, tmp_path)
    pipe.env["DUETIME_WORKER_SHUTDOWN_GRACE"] = str(GRACE_SECONDS)
    pipe.env["DUETIME_WORKER_PROCESSES"] = "2"
    try:
        pipe.start_all()
        _scenario(pipe, http_target)
    finally:
        pipe.stop_all()


def _scenario(pipe: Pipeline, http_target: RecordingTarget) -> None:
    url = f"{http_target.url}{SLOW}"
    pipe.apply(
        [
            e2e_job(
                "hand-back",
                url,
                target={"http": {"url": url, "timeout_seconds": 900}},
                schedule={"at": "2000-01-01T00:00:00Z"},
                lease_seconds=int(LEASE.total_seconds()),
                heartbeat_seconds=5,
                retry={
                    "max_attempts": 3,
                    "initial_interval_seconds": 300,
                    "max_interval_seconds": 300,
                },
            )
        ]
    )
    (first,) = http_target.wait_for(SLOW, 1, timeout=90) or [None]
    assert first is not None, pipe.logs()
    run_id = first.headers["X-Duetime-Run-Id"]

    # SIGTERM to the one worker process that executes attempt 1 (worker id "<base>-<index>").
    holder = pipe.sql("SELECT worker FROM runs WHERE run_id = :r", r=run_id)[0].worker
    index = holder.rsplit("-", 1)[1]
    pid = _process_pid(pipe.log_text("worker"), index)
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    pipe.wait_until(
        "the worker process to stop",
        lambda: f"worker.process_exited index={index} pid={pid} code=0" in pipe.log_text("worker"),
        timeout=60,
    )
    stopped_in = time.monotonic() - started

    # The retry is due at once: neither the backoff (300 s) nor the lease (120 s) is waited for.
    pipe.wait_until(
        "the run to succeed",
        lambda: pipe.sql("SELECT 1 FROM runs WHERE run_id = :r AND state = 'succeeded'", r=run_id),
        timeout=90,
    )
    (run,) = check_runs(pipe, [run_id])  # I2, I5, I3
    assert (run.state, run.attempt) == ("succeeded", 2)
    attempts = pipe.sql(
        "SELECT attempt, outcome, worker, started_at, error FROM run_attempts "
        "WHERE run_id = :r ORDER BY attempt",
        r=run_id,
    )
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "handed_back"), (2, "succeeded")]
    handed, retry = attempts
    assert handed.worker == holder
    assert handed.error == "worker stopped during the attempt"
    # Retried before attempt 1's lease could have lapsed: nobody waited for the reaper.
    assert retry.started_at < handed.started_at + LEASE
    assert not pipe.sql("SELECT 1 FROM run_fenced_completions WHERE run_id = :r", r=run_id)
    assert " lease.expired " not in pipe.log_text("reaper")
    # The stopping process waited its grace, then handed the attempt back.
    assert stopped_in >= GRACE_SECONDS
    log = pipe.log_text("worker")
    assert f"worker_id={holder}" in log and "worker.handing_back count=1" in log
    assert f"run.handed_back run_id={run_id} attempt=1" in log
    # I8: each request carried its run and attempt; the retry reached the target once.
    keys = [r.headers["Idempotency-Key"] for r in http_target.matching(SLOW)]
    assert keys == [f"{run_id}:1", f"{run_id}:2"]


def _process_pid(log: str, index: str) -> int:
    """The pid of worker process ``index`` from its supervisor's ``worker.process_started``."""
    for line in log.splitlines():
        if " worker.process_started " in line and f" index={index} " in line:
            return int(line.rsplit("pid=", 1)[1].split()[0])
    raise AssertionError(f"no worker process {index} in the log:\n{log}")


# A worker cut off from PostgreSQL and the broker -------------------------------------------------
CUT_LEASE_SECONDS = 6
# Attempt 1 is answered 30 s after it arrives, long after its 6 s lease: the worker, cut off at
# once, can neither renew the lease nor hear that it is gone, and must stop the call by itself.
CUT = "/slow-once-30/cut-off"
CUT_CLIENT = "cut-worker"
AT_ONCE = {"at": "2000-01-01T00:00:00Z"}


class _BrokerBehindProxy(KafkaBroker):
    """A private broker that advertises the proxy's port: every client reaches it through the
    proxy, which can then cut one process's connections (by their Kafka ``client.id``)."""

    def __init__(self, data_dir: Path, port: int, advertised_port: int) -> None:
        super().__init__(data_dir, port=port)
        self._advertised = f"tcp://127.0.0.1:{advertised_port}"

    def argv(self) -> list[str]:
        argv = super().argv()
        argv[argv.index("--advertised-listener-url") + 1] = self._advertised
        return argv


def test_a_worker_cut_off_from_postgres_and_the_broker_stops_within_its_lease_and_another_retries(
    database_url: str, http_target: RecordingTarget, tmp_path: Path
) -> None:
    url = make_url(database_url)
    with contextlib.ExitStack() as cleanup:
        db_proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
        cleanup.callback(db_proxy.close)
        broker_port = find_free_port()
        broker_proxy = TcpProxy("127.0.0.1", broker_port, kafka_client_id=CUT_CLIENT)
        cleanup.callback(broker_proxy.close)
        broker = _BrokerBehindProxy(tmp_path / "broker", broker_port, broker_proxy.port)
        cleanup.callback(broker.stop)
        broker.start()
        pipe = Pipeline(database_url, f"127.0.0.1:{broker_proxy.port}", tmp_path)
        cleanup.callback(pipe.stop_all)
        for name in ("planner", "dispatcher", "reaper"):
            pipe.start(name)
        proxied = url.set(host="127.0.0.1", port=db_proxy.port)
        pipe.env["DUETIME_DATABASE_URL"] = proxied.render_as_string(hide_password=False)
        pipe.env["DUETIME_KAFKA_CLIENT_ID"] = CUT_CLIENT
        pipe.env["DUETIME_WORKER_PROCESSES"] = "1"
        pipe.start("worker")
        pipe.env["DUETIME_DATABASE_URL"] = database_url
        del pipe.env["DUETIME_KAFKA_CLIENT_ID"]
        _cut_off_scenario(pipe, db_proxy, broker_proxy, http_target)


def _cut_off_scenario(
    pipe: Pipeline, db_proxy: TcpProxy, broker_proxy: TcpProxy, http_target: RecordingTarget
) -> None:
    pipe.apply(
        [
            e2e_job(
                "cut-off",
                f"{http_target.url}{CUT}",
                schedule=AT_ONCE,
                lease_seconds=CUT_LEASE_SECONDS,
                heartbeat_seconds=1,
                retry={"max_attempts": 3, "initial_interval_seconds": 0.5},
            )
        ]
    )
    (first,) = http_target.wait_for(CUT, 1, timeout=90) or [None]
    assert first is not None, pipe.logs()
    # The worker's own Kafka connections go through the proxy's cut, and only those.
    assert broker_proxy.cut_connections > 0
    db_proxy.set_mode("blackhole")
    broker_proxy.set_mode("blackhole")
    cut_at = time.monotonic()
    run_id = first.headers["X-Duetime-Run-Id"]
    assert first.headers["X-Duetime-Attempt"] == "1"
    # Another worker, which reaches both, joins the group while the first one is cut off.
    pipe.start("worker", instance="worker-2")

    # The worker cannot hear the database: it cancels attempt 1's call by its own clock, within
    # the lease (its local deadline is the lease minus a margin), and completes nothing.
    def self_fenced() -> bool:
        return any(
            " lease.lost " in line and run_id in line and "attempt=1" in line
            for line in pipe.log_text("worker").splitlines()
        )

    pipe.wait_until("the cut-off worker to fence itself", self_fenced, timeout=60)
    fenced_in = time.monotonic() - cut_at
    assert fenced_in < CUT_LEASE_SECONDS + 2, fenced_in  # its lease, plus the log's latency
    # The reaper ends attempt 1 by the database clock, and the other worker runs attempt 2
    # while the first is still cut off.
    pipe.wait_until(
        "attempt 2 to succeed on the other worker, the first still cut off",
        lambda: pipe.sql("SELECT 1 FROM runs WHERE run_id = :r AND state = 'succeeded'", r=run_id),
        timeout=120,
    )
    attempts = pipe.sql(
        "SELECT attempt, outcome, worker FROM run_attempts WHERE run_id = :r ORDER BY attempt",
        r=run_id,
    )
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_expired"), (2, "succeeded")]
    cut_worker = attempts[0].worker
    assert attempts[1].worker != cut_worker
    # The cut heals: what the first worker sent meanwhile arrives, late, and changes nothing
    # (its renewals match no lease). It recovers by itself: its group takes it back and it
    # executes runs again.
    db_proxy.set_mode("pass")
    broker_proxy.set_mode("pass")

    def rejoined() -> bool:
        after_cut = pipe.log_text("worker").rsplit(" consumer.lost ", 1)[-1]
        return f" consumer.assigned partitions={pipe.prefix}" in after_cut

    pipe.wait_until("the healed worker to rejoin its group", rejoined, timeout=90)
    pipe.apply(
        [e2e_job(f"after-{n}", f"{http_target.url}/after", schedule=AT_ONCE) for n in range(40)]
    )
    pipe.wait_until(
        "the healed worker to execute runs again",
        lambda: pipe.sql(
            "SELECT 1 FROM run_attempts WHERE job_id LIKE 'after-%' AND worker = :w "
            "AND outcome = 'succeeded'",
            w=cut_worker,
        ),
        timeout=90,
    )
    (run,) = check_runs(pipe, [run_id])  # I2, I5, I3
    assert run.attempt == 2
    # The cut-off worker completed nothing: no completion of attempt 1 reached the database.
    assert not pipe.sql("SELECT 1 FROM run_fenced_completions WHERE run_id = :r", r=run_id)
    keys = [r.headers["Idempotency-Key"] for r in http_target.matching(CUT)]
    assert keys == [f"{run_id}:1", f"{run_id}:2"]
