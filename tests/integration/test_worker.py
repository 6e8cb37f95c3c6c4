"""The worker on the real stack: runs.ready -> claim -> HTTP or Kafka target -> fenced completion.

Each test gets its own database (``database_url``), its own topic prefix and consumer group, a
worker running in-process on a thread (one test runs it as a subprocess through the entry point),
and a recording HTTP target on 127.0.0.1 (so private targets are allowed). Tests wait on
conditions with deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from sqlalchemy import text
from sqlalchemy.engine import make_url

from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.records import RUN_EVENTS, RUN_RESULTS
from duetime.bus.topics import TopicCatalog, TopicSpec
from duetime.cli.supervisor import STOP_GRACE
from duetime.config import Settings
from duetime.errors import StoreError
from duetime.model import HttpTarget, KafkaTarget, RunEvent, SecretRef, Target, run_id_for
from duetime.store import NewRun, Store
from duetime_workers import WorkerConfig, WorkerService
from duetime_workers.attempt import AttemptRunner
from duetime_workers.blocking import BlockingCalls
from duetime_workers.http_target import HttpExecutor
from duetime_workers.kafka_target import KafkaExecutor
from duetime_workers.producer import AsyncProducer
from duetime_workers.targets import Targets
from duetime_workers.transport import make_http_client
from tests.fixtures.proxy import TcpProxy
from tests.fixtures.target import TargetServer

pytestmark = pytest.mark.integration

T = TypeVar("T")
WAIT = 30.0


# --- a recording HTTP target -----------------------------------------------------------------
@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class Target_:
    """``/ok``: 200. ``/status/<code>``: that status (503 adds Retry-After: 120).
    ``/hold/<key>``: waits until ``release(key)``, then 200."""

    seen: list[Seen] = field(default_factory=list)
    holds: dict[str, threading.Event] = field(default_factory=dict)
    arrived: dict[str, threading.Event] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    active: int = 0  # requests being held right now
    max_active: int = 0

    def hold(self, key: str) -> tuple[threading.Event, threading.Event]:
        with self.lock:
            return (
                self.arrived.setdefault(key, threading.Event()),
                self.holds.setdefault(key, threading.Event()),
            )

    def requests(self, prefix: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path.startswith(prefix)]


@pytest.fixture
def target() -> Iterator[tuple[Target_, str]]:
    state = Target_()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            with state.lock:
                state.seen.append(Seen(self.path, dict(self.headers.items())))
            parts = self.path.strip("/").split("/")
            status, extra = 200, []
            if parts[0] == "status":
                status = int(parts[1])
                if status == 503:
                    extra.append(("Retry-After", "120"))
            elif parts[0] == "hold":
                arrived, release = state.hold(parts[1])
                with state.lock:
                    state.active += 1
                    state.max_active = max(state.max_active, state.active)
                arrived.set()
                release.wait(WAIT)
                with state.lock:
                    state.active -= 1
            self.send_response(status)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _handle

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = TargetServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        for event in list(state.holds.values()):
            event.set()
        server.shutdown()
        server.server_close()


# --- the environment: settings, store, producer, worker --------------------------------------
@dataclass
class Env:
    settings: Settings
    store: Store
    producer: Producer
    catalog: TopicCatalog

    def run_row(self, run_id: uuid.UUID) -> Any:
        with self.store.engine.begin() as conn:
            return conn.execute(
                text("SELECT *, now() AS db_now FROM runs WHERE run_id = :r"), {"r": run_id}
            ).one()

    def attempts(self, run_id: uuid.UUID) -> list[Any]:
        return list(self.store.run_attempts_list(run_id))

    def fenced(self, run_id: uuid.UUID) -> list[Any]:
        with self.store.engine.begin() as conn:
            return list(
                conn.execute(
                    text("SELECT * FROM run_fenced_completions WHERE run_id = :r"), {"r": run_id}
                )
            )

    def new_run(
        self,
        target: Target,
        *,
        max_attempts: int = 3,
        lease: timedelta = timedelta(seconds=30),
        heartbeat: timedelta = timedelta(seconds=10),
    ) -> RunEvent:
        """Insert a scheduled run row (as the planner would) and return its first RunEvent."""
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        scheduled_for = datetime.now(UTC).replace(microsecond=0)
        run_id = run_id_for(job_id, scheduled_for)
        with self.store.tx() as tx:
            tx.runs_ensure_partition(scheduled_for.date())
            tx.runs_insert(
                [NewRun(run_id, job_id, "acme", "svc", scheduled_for, scheduled_for, max_attempts)]
            )
        return RunEvent(
            run_id=run_id,
            job_id=job_id,
            tenant="acme",
            scheduled_for=scheduled_for,
            due_at=scheduled_for,
            attempt=1,
            max_attempts=max_attempts,
            target_service="svc",
            target=target,
            lease=lease,
            heartbeat_interval=heartbeat,
        )

    def publish(self, *runs: RunEvent, raw: bytes | None = None) -> None:
        if raw is not None:
            self.producer.produce(self.catalog.ready, raw, b"svc", headers=RUN_EVENTS.headers())
        for run in runs:
            self.producer.produce(
                self.catalog.ready,
                RUN_EVENTS.encode(run),
                run.target_service.encode(),
                headers=RUN_EVENTS.headers(),
            )
        assert self.producer.flush(10) == 0


@pytest.fixture
def env(database_url: str, stack: Any) -> Iterator[Env]:
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"w{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    store = Store(database_url, pool_size=2)
    yield Env(
        settings, store, Producer(producer_config(settings)), TopicCatalog(settings.topic_prefix)
    )
    store.close()


class InProcessWorker:
    """``WorkerService.run()`` on its own thread and event loop."""

    def __init__(self, settings: Settings, **config: Any) -> None:
        defaults: dict[str, Any] = {
            "worker_id": f"w-{uuid.uuid4().hex[:6]}",
            "concurrency": 4,
            "allow_private_targets": True,
            "shutdown_grace": timedelta(seconds=2),
            "group_id": f"workers-{uuid.uuid4().hex[:8]}",
        }
        self.config = WorkerConfig(**{**defaults, **config})
        self.service = WorkerService(settings, self.config)
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, name="worker-under-test", daemon=True)

    def _run(self) -> None:
        self.exit_code = asyncio.run(self.service.run())

    def start(self) -> InProcessWorker:
        self.thread.start()
        assert self.service.consuming.wait(WAIT), "worker never got partitions"
        return self

    def stop(self) -> None:
        self.service.request_stop()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        assert self.exit_code == 0


@pytest.fixture
def worker(env: Env) -> Iterator[Callable[..., InProcessWorker]]:
    started: list[InProcessWorker] = []

    def start(**config: Any) -> InProcessWorker:
        w = InProcessWorker(env.settings, **config).start()
        started.append(w)
        return w

    yield start
    for w in started:
        if w.thread.is_alive():
            w.stop()


def wait_for(probe: Callable[[], T | None], what: str, within: float = WAIT) -> T:
    """Poll ``probe`` until it returns something truthy (then return it) or the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def state_is(env: Env, run_id: uuid.UUID, state: str, attempt: int = 1) -> Callable[[], Any]:
    """A probe for "attempt ``attempt`` ended in ``state``" (a claim always bumps attempt)."""

    def probe() -> Any:
        row = env.run_row(run_id)
        return row if (row.state, row.attempt) == (state, attempt) else None

    return probe


def read_topic(settings: Settings, topic: str, count: int, partitions: int) -> list[Any]:
    """Read ``count`` records from the start of ``topic`` without a group join (assign)."""
    consumer = Consumer(consumer_config(settings, f"reader-{uuid.uuid4().hex[:8]}"))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: list[Any] = []
    deadline = time.monotonic() + WAIT
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                found.append(msg)
    finally:
        consumer.close()
    return found


# --- tests -----------------------------------------------------------------------------------
def test_success_sends_the_idempotency_key_and_records_the_attempt(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    recorder, base = target
    run = env.new_run(HttpTarget(url=f"{base}/ok/{uuid.uuid4().hex}"))
    w = worker()
    env.publish(run, raw=b"\x00not avro at all")  # a poison record first: skipped, not fatal

    row = wait_for(state_is(env, run.run_id, "succeeded"), "the run to succeed")
    assert (row.attempt, row.worker, row.lease_token) == (1, w.config.worker_id, None)
    assert row.finished_at is not None

    (request,) = recorder.requests("/ok/")
    assert request.headers["Idempotency-Key"] == f"{run.run_id}:1"
    assert request.headers["X-Duetime-Run-Id"] == str(run.run_id)
    assert request.headers["X-Duetime-Attempt"] == "1"
    assert request.headers["X-Duetime-Fencing-Token"] == "2"
    assert request.headers["X-Duetime-Scheduled-For"] == (
        run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    assert request.headers["User-Agent"].startswith("duetime-worker/")

    (attempt,) = env.attempts(run.run_id)
    assert (attempt.attempt, attempt.outcome, attempt.status_code, attempt.worker) == (
        1,
        "succeeded",
        200,
        w.config.worker_id,
    )
    (result,) = read_topic(env.settings, env.catalog.results, 1, env.catalog.partitions)
    decoded = RUN_RESULTS.decode(result.value(), result.headers())
    assert (decoded.run_id, decoded.outcome, decoded.state) == (
        run.run_id,
        "succeeded",
        "succeeded",
    )
    wait_for(lambda: w.service.stats["succeeded"] == 1, "the worker's count")


def test_duplicate_message_is_claimed_once(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    recorder, base = target
    run = env.new_run(HttpTarget(url=f"{base}/ok/dup"))
    w = worker()
    env.publish(run, run)
    wait_for(lambda: sum(w.service.stats.values()) == 2, "both copies to be handled")
    assert (w.service.stats["succeeded"], w.service.stats["claim_skipped"]) == (1, 1)
    assert len(recorder.requests("/ok/dup")) == 1
    assert len(env.attempts(run.run_id)) == 1
    assert env.run_row(run.run_id).state == "succeeded"


def test_server_error_schedules_a_retry(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    _, base = target
    plain = env.new_run(HttpTarget(url=f"{base}/status/500"))
    throttled = env.new_run(HttpTarget(url=f"{base}/status/503"))
    worker()
    env.publish(plain, throttled)

    row = wait_for(state_is(env, plain.run_id, "scheduled"), "the retry")
    (attempt,) = env.attempts(plain.run_id)
    assert (attempt.outcome, attempt.status_code) == ("failed", 500)
    assert row.published_at is None  # the planner's outbox re-publishes it when due
    assert row.last_error.startswith("HTTP 500")
    assert row.due_at > attempt.finished_at  # backoff: due again in the future
    assert row.next_attempt_at == row.due_at

    row = wait_for(state_is(env, throttled.run_id, "scheduled"), "the throttled retry")
    # Retry-After: 120 is a lower bound for the delay.
    assert row.due_at >= row.db_now + timedelta(seconds=100)


def test_a_retried_attempt_reaches_the_target_with_a_higher_fencing_token(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    """Attempt 1 fails with a 500 and is handed back for a retry; attempt 2, published as the
    planner's outbox would, reaches the target with a higher token. A late copy of attempt 1's
    message claims nothing, so it never reaches the target with its old token."""
    recorder, base = target
    path = f"/status/500/{uuid.uuid4().hex}"
    run = env.new_run(HttpTarget(url=f"{base}{path}"))
    worker()
    env.publish(run)
    wait_for(state_is(env, run.run_id, "scheduled"), "attempt 1 to be handed back")
    env.publish(run, replace(run, attempt=2))  # a stale copy of attempt 1, then attempt 2
    wait_for(state_is(env, run.run_id, "scheduled", attempt=2), "attempt 2 to be handed back")

    seen = recorder.requests(path)
    assert [
        (s.headers["X-Duetime-Attempt"], s.headers["X-Duetime-Fencing-Token"]) for s in seen
    ] == [
        ("1", "2"),
        ("2", "4"),
    ]
    assert [a.attempt for a in env.attempts(run.run_id)] == [1, 2]


def test_client_error_is_dead(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    _, base = target
    run = env.new_run(HttpTarget(url=f"{base}/status/400"))
    worker()
    env.publish(run)
    row = wait_for(state_is(env, run.run_id, "dead"), "the run to die")
    assert row.attempt == 1 and row.finished_at is not None
    assert row.last_error.startswith("HTTP 400")
    (attempt,) = env.attempts(run.run_id)
    assert (attempt.outcome, attempt.status_code) == ("failed", 400)


def _run_rows_text(env: Env, run_id: uuid.UUID) -> str:
    """Every column of the run's row and of its attempts' rows, as PostgreSQL prints them."""
    with env.store.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT r::text FROM runs r WHERE run_id = :r "
                "UNION ALL SELECT a::text FROM run_attempts a WHERE run_id = :r"
            ),
            {"r": run_id},
        )
        return "\n".join(row[0] for row in rows)


def test_a_secret_reference_reaches_the_target_resolved_and_nowhere_else(
    env: Env,
    worker: Callable[..., InProcessWorker],
    target: tuple[Target_, str],
    tmp_path: Path,
) -> None:
    recorder, base = target
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    (tmp_path / "billing-api-token").write_text(secret + "\n")
    run = env.new_run(
        HttpTarget(
            url=f"{base}/ok/secret",
            headers=(("Authorization", SecretRef("billing-api-token", "Bearer ")),),
        )
    )
    worker(secrets_dir=tmp_path)
    env.publish(run)
    wait_for(state_is(env, run.run_id, "succeeded"), "the run to succeed")

    (request,) = recorder.requests("/ok/secret")
    assert request.headers["Authorization"] == f"Bearer {secret}"
    (ready,) = read_topic(env.settings, env.catalog.ready, 1, env.catalog.partitions)
    assert b"billing-api-token" in ready.value() and secret.encode() not in ready.value()
    (result,) = read_topic(env.settings, env.catalog.results, 1, env.catalog.partitions)
    assert secret.encode() not in result.value()
    assert secret not in _run_rows_text(env, run.run_id)


def test_a_secret_the_worker_lacks_fails_the_attempt_with_a_clear_error(
    env: Env,
    worker: Callable[..., InProcessWorker],
    target: tuple[Target_, str],
    tmp_path: Path,
) -> None:
    """A configuration error on the worker side: the attempt fails as retryable (another worker,
    or this one once the secret is provisioned, may succeed), so the job's retry policy bounds
    it, and the error says which secret and which worker, without any value."""
    recorder, base = target
    run = env.new_run(
        HttpTarget(
            url=f"{base}/ok/missing-secret",
            headers=(("Authorization", SecretRef("not-provisioned", "Bearer ")),),
        )
    )
    w = worker(secrets_dir=tmp_path)
    env.publish(run)
    row = wait_for(state_is(env, run.run_id, "scheduled"), "the retry")
    expected = f"secret 'not-provisioned' not found on worker {w.config.worker_id} (no file "
    assert row.last_error.startswith(expected)
    assert "DUETIME_SECRET_NOT_PROVISIONED" in row.last_error
    (attempt,) = env.attempts(run.run_id)
    assert (attempt.outcome, attempt.error) == ("failed", row.last_error)
    assert row.due_at > attempt.finished_at  # backoff, as for any retryable failure
    assert recorder.requests("/ok/missing-secret") == []


def test_backpressure_keeps_in_flight_attempts_within_the_slots(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    """With 2 slots and 6 runs the worker pauses the partition and resumes it as slots free up;
    every run is executed exactly once and never more than 2 at a time."""
    recorder, base = target
    runs = [env.new_run(HttpTarget(url=f"{base}/hold/bp{i}")) for i in range(6)]
    gates = [recorder.hold(f"bp{i}") for i in range(6)]

    def in_flight() -> list[int]:
        return [
            i
            for i, (arrived, release) in enumerate(gates)
            if arrived.is_set() and not release.is_set()
        ]

    w = worker(concurrency=2)
    env.publish(*runs)
    for released in range(6):
        wanted = min(2, 6 - released)
        wait_for(partial(_at_least, in_flight, wanted), "requests to arrive")
        gates[in_flight()[0]][1].set()  # finish the oldest; a slot frees up
    for run in runs:
        wait_for(state_is(env, run.run_id, "succeeded"), f"run {run.run_id} to succeed")
    assert recorder.max_active == 2
    assert w.service.stats["succeeded"] == 6
    assert len(recorder.requests("/hold/bp")) == 6  # each exactly once


def _at_least(items: Callable[[], list[int]], count: int) -> bool:
    return len(items()) >= count


def _steal_lease(env: Env, run_id: uuid.UUID) -> uuid.UUID:
    """What the reaper does to an expired lease: the run gets a new lease token."""
    with env.store.engine.begin() as conn:
        token: uuid.UUID = conn.execute(
            text(
                "UPDATE runs SET lease_token = gen_random_uuid() WHERE run_id = :r "
                "AND state = 'running' RETURNING lease_token"
            ),
            {"r": run_id},
        ).scalar_one()
        return token


def test_completion_with_a_stale_token_is_rejected_and_recorded(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    recorder, base = target
    arrived, release = recorder.hold("fence")
    # A long heartbeat interval: only the completion's compare-and-set notices the theft.
    run = env.new_run(
        HttpTarget(url=f"{base}/hold/fence"),
        lease=timedelta(seconds=30),
        heartbeat=timedelta(seconds=10),
    )
    w = worker()
    env.publish(run)
    assert arrived.wait(WAIT)
    new_token = _steal_lease(env, run.run_id)
    release.set()

    (fenced,) = wait_for(lambda: env.fenced(run.run_id), "the rejected completion")
    assert (fenced.attempt, fenced.worker, fenced.outcome) == (1, w.config.worker_id, "succeeded")
    assert fenced.lease_token != new_token
    row = env.run_row(run.run_id)
    assert (row.state, row.lease_token) == ("running", new_token)  # untouched by the zombie
    assert env.attempts(run.run_id)[0].outcome is None
    wait_for(lambda: w.service.stats["completion_fenced"] == 1, "the worker's count")


def test_lost_lease_stops_the_execution_without_completing(
    env: Env, worker: Callable[..., InProcessWorker], target: tuple[Target_, str]
) -> None:
    recorder, base = target
    arrived, _release = recorder.hold("lost")
    run = env.new_run(
        HttpTarget(url=f"{base}/hold/lost", timeout=timedelta(seconds=25)),
        lease=timedelta(seconds=3),
        heartbeat=timedelta(milliseconds=300),
    )
    w = worker()
    env.publish(run)
    assert arrived.wait(WAIT)
    started = time.monotonic()
    new_token = _steal_lease(env, run.run_id)

    wait_for(lambda: w.service.stats["lease_lost"] == 1, "the worker to fence itself")
    assert time.monotonic() - started < 3.0  # the next heartbeat noticed, not the timeout
    assert env.fenced(run.run_id) == []  # it did not even try to complete
    row = env.run_row(run.run_id)
    assert (row.state, row.lease_token) == ("running", new_token)


def test_kafka_target_emits_the_record_with_duetime_headers(
    env: Env, worker: Callable[..., InProcessWorker]
) -> None:
    user_topic = f"user-{uuid.uuid4().hex[:8]}"
    create_topics(env.settings, [TopicSpec(user_topic, 1)])
    run = env.new_run(KafkaTarget(topic=user_topic, key="order-7", value='{"bill": true}'))
    worker()
    env.publish(run)
    wait_for(state_is(env, run.run_id, "succeeded"), "the run to succeed")
    (record,) = read_topic(env.settings, user_topic, 1, 1)
    assert (record.key(), record.value()) == (b"order-7", b'{"bill": true}')
    headers = dict(record.headers())
    assert headers["Idempotency-Key"] == f"{run.run_id}:1".encode()
    assert headers["X-Duetime-Attempt"] == b"1"
    # A worker's execution of attempt 1: one above the dispatcher's fast path for attempt 1.
    assert headers["X-Duetime-Fencing-Token"] == b"2"


def test_kafka_target_on_an_internal_topic_is_refused(
    env: Env, worker: Callable[..., InProcessWorker]
) -> None:
    run = env.new_run(KafkaTarget(topic=env.catalog.ready, value="forged"))
    worker()
    env.publish(run)
    row = wait_for(state_is(env, run.run_id, "dead"), "the run to die")
    assert "internal to duetime" in row.last_error


def _worker_env(env: Env, worker_id: str) -> dict[str, str]:
    return {
        **os.environ,
        "DUETIME_DATABASE_URL": env.settings.database_url,
        "DUETIME_KAFKA_BOOTSTRAP": env.settings.kafka_bootstrap,
        "DUETIME_TOPIC_PREFIX": env.settings.topic_prefix,
        "DUETIME_ALLOW_PRIVATE_TARGETS": "1",
        "DUETIME_WORKER_ID": worker_id,
        "DUETIME_DATA_DIR": str(env.settings.data_dir),
    }


@contextlib.contextmanager
def _stopped_on_failure(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Stop ``proc`` (and with it the processes it supervises) when the block fails, so a
    failed wait leaves no worker running after the test."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            _stop(proc)
        raise


def _stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM) -> str:
    try:
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    return stderr


def test_entry_point_runs_until_sigterm_and_exits_cleanly(
    env: Env, target: tuple[Target_, str]
) -> None:
    _, base = target
    run = env.new_run(HttpTarget(url=f"{base}/ok/cli"))
    env.publish(run)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "duetime_workers",
            "--concurrency",
            "2",
            "--processes",
            "1",
            "--log-level",
            "DEBUG",
        ],
        env=_worker_env(env, "cli-worker"),
        stderr=subprocess.PIPE,
        text=True,
    )
    with _stopped_on_failure(proc):
        row = wait_for(state_is(env, run.run_id, "succeeded"), "the run to succeed")
    assert row.worker == "cli-worker"
    lines = _stop(proc).splitlines()
    assert any(" worker.started " in line for line in lines)
    assert any(" run.claimed " in line and str(run.run_id) in line for line in lines)
    assert any(" run.succeeded " in line and "tenant=acme" in line for line in lines)
    assert any(" worker.stopped " in line for line in lines)


def test_several_worker_processes_never_run_one_attempt_twice(
    env: Env, target: tuple[Target_, str]
) -> None:
    """Two worker processes under one supervisor share the partitions; every run is executed
    once, each attempt by exactly one of them, even with every record published twice."""
    recorder, base = target
    runs = [env.new_run(HttpTarget(url=f"{base}/ok/multi")) for _ in range(120)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "duetime_workers", "--processes", "2"],
        env=_worker_env(env, "multi"),
        stderr=subprocess.PIPE,
        text=True,
    )
    with _stopped_on_failure(proc):
        env.publish(*runs)
        env.publish(*runs)  # duplicates on purpose: both copies may land on different processes
        for run in runs:
            wait_for(state_is(env, run.run_id, "succeeded"), f"run {run.run_id} to succeed")
    stderr = _stop(proc)
    assert " worker.supervisor_stopped code=0" in stderr
    seen = recorder.requests("/ok/multi")
    keys = [s.headers["Idempotency-Key"] for s in seen]
    assert len(keys) == len(set(keys)) == 120  # one request per run, attempt 1 only
    assert all(key.endswith(":1") for key in keys)
    with env.store.engine.begin() as conn:
        workers = conn.execute(
            text("SELECT DISTINCT worker FROM run_attempts WHERE run_id = ANY(:ids)"),
            {"ids": [r.run_id for r in runs]},
        ).scalars()
        assert set(workers) <= {"multi-0", "multi-1"}


def test_stops_within_its_grace_when_the_database_is_cut_off(
    env: Env, target: tuple[Target_, str]
) -> None:
    """An attempt is executing when PostgreSQL goes silent (a TCP proxy stops passing bytes),
    then SIGTERM: the grace (1 s) passes, the hand-back statement hangs, and so would the
    clean-up; the process ends at its stop deadline (grace + 3 s) anyway, well within the 10 s
    ``duetime up`` gives a service before SIGKILL."""
    recorder, base = target
    run = env.new_run(HttpTarget(url=f"{base}/hold/cut-off"))
    url = make_url(env.settings.database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    arrived, release = recorder.hold("cut-off")
    proc = subprocess.Popen(
        [sys.executable, "-m", "duetime_workers", "--processes", "1", "--shutdown-grace", "1"],
        env={**_worker_env(env, "cut-off"), "DUETIME_DATABASE_URL": proxied},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with _stopped_on_failure(proc):
            env.publish(run)
            assert arrived.wait(WAIT), "the attempt never reached the target"
        proxy.set_mode("blackhole")
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            raise AssertionError(f"still running {STOP_GRACE} s after SIGTERM:\n{stderr}") from None
        took = time.monotonic() - began
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
    assert took < 1 + 3 + 2, stderr  # the deadline, with slack for a busy machine
    assert proc.returncode in (0, 70), stderr
    assert " worker.handing_back " in stderr


def test_a_claim_whose_reply_was_lost_still_runs_the_attempt(
    env: Env, target: tuple[Target_, str]
) -> None:
    """The claim commits, then the connection dies before the reply: the retry (same token)
    recognises the claim, so a run with max_attempts 1 is executed instead of burnt."""
    recorder, base = target
    run = env.new_run(HttpTarget(url=f"{base}/ok/lost-reply"), max_attempts=1)

    class LosesFirstClaimReply(Store):
        lost = 0

        def runs_claim_batch(self, worker: str, requests: Any) -> Any:
            claims = super().runs_claim_batch(worker, requests)
            if not LosesFirstClaimReply.lost:
                LosesFirstClaimReply.lost += 1
                raise StoreError("database error: OperationalError: server closed the connection")
            return claims

    store = LosesFirstClaimReply(env.settings.database_url, pool_size=2)
    config = WorkerConfig(worker_id="w-lost", allow_private_targets=True)
    runner_calls = BlockingCalls(max_workers=4)

    async def scenario() -> Any:
        runner = AttemptRunner(
            config=config,
            store=store,
            events=_NoEvents(),
            targets=Targets(
                HttpExecutor(make_http_client(allow_private=True, max_connections=4), "test"),
                KafkaExecutor(AsyncProducer(Producer(producer_config(env.settings))), "x."),
            ),
            calls=runner_calls,
            stopping=asyncio.Event(),
        )
        runner.start()
        try:
            return await runner.run(run)
        finally:
            await runner.stop()

    try:
        report = asyncio.run(scenario())
    finally:
        runner_calls.shutdown()
        store.close()
    assert report.status == "succeeded"
    assert LosesFirstClaimReply.lost == 1
    assert len(recorder.requests("/ok/lost-reply")) == 1
    row = env.run_row(run.run_id)
    assert (row.state, row.attempt) == ("succeeded", 1)


class _NoEvents:
    def heartbeat(self, heartbeat: Any) -> None:
        return None

    def result(self, result: Any) -> None:
        return None
