"""The dispatcher as a process on the real broker: on time, once, past poison, across a kill -9,
routed from headers, and on the database clock.

Each test gets its own topic prefix (so its own topics and consumer group) and runs
``python -m duetime_dispatcher`` as a subprocess, the way the CLI runs it. Timing bounds are
behaviour bounds with slack for a busy 2-core machine, not benchmarks.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from sqlalchemy import text

from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.records import RUN_EVENTS, RUN_RESULTS
from duetime.bus.run_headers import epoch_ms, read_release, routing_headers
from duetime.bus.target_records import format_instant
from duetime.bus.topics import TopicCatalog, TopicSpec
from duetime.config import Settings
from duetime.errors import CodecError
from duetime.lifetime import parent_death_preexec
from duetime.model import HttpTarget, KafkaTarget, RunEvent, run_id_for
from duetime.store import NewRun, Store
from duetime_infra import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: How late a release may arrive on runs.ready (dispatcher lateness + produce + our consumer).
LATE_BOUND = timedelta(seconds=1.5)
WAIT = 30.0


@pytest.fixture
def settings(stack: Any, database_url: str, tmp_path: Path) -> Settings:
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        etcd_endpoints=stack.etcd_endpoints,
        topic_prefix=f"d{uuid.uuid4().hex[:8]}.",
        profile="local",
        data_dir=tmp_path / "data",
    )
    create_topics(settings)
    return settings


def wait_for(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class DispatcherProcess:
    """``python -m duetime_dispatcher`` with its stderr collected line by line."""

    def __init__(self, settings: Settings, **extra_env: str) -> None:
        env = {
            **os.environ,
            "DUETIME_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "DUETIME_DATABASE_URL": settings.database_url,
            "DUETIME_TOPIC_PREFIX": settings.topic_prefix,
            "DUETIME_PROFILE": settings.profile,
            "DUETIME_DATA_DIR": str(settings.data_dir),
            "DUETIME_LOG_LEVEL": "DEBUG",  # for run.held, which tells us a run is in the wheel
            # Releases at the due instant; the release ahead for claims ahead has its own test.
            "DUETIME_DISPATCHER_CLAIM_AHEAD": "0",
            **extra_env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "duetime_dispatcher"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # A test session that is killed takes its dispatchers with it.
            preexec_fn=parent_death_preexec(signal.SIGTERM),
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def events(self, name: str, *needles: str) -> list[str]:
        """Log lines of event ``name`` containing every needle."""
        return [
            line
            for line in list(self.lines)
            if f" {name} " in f"{line} " and all(needle in line for needle in needles)
        ]

    def wait_event(self, name: str, *needles: str, timeout: float = WAIT) -> str:
        wait_for(
            lambda: bool(self.events(name, *needles)) or self.proc.poll() is not None,
            name,
            timeout,
        )
        found = self.events(name, *needles)
        assert found, f"dispatcher exited ({self.proc.returncode}) before {name}:\n{self.log()}"
        return found[0]

    def log(self) -> str:
        return "\n".join(self.lines[-80:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = WAIT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


@pytest.fixture
def dispatchers(settings: Settings) -> Iterator[Callable[..., DispatcherProcess]]:
    started: list[DispatcherProcess] = []

    def start(**extra_env: str) -> DispatcherProcess:
        process = DispatcherProcess(settings, **extra_env)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop(signal.SIGKILL)


@dataclass(frozen=True)
class Arrival:
    run: RunEvent | None  # None: the value is not a RunEvent (forwarded untouched all the same)
    key: bytes | None
    created_ms: int  # the record's CreateTime: when the dispatcher produced it
    arrived_at: datetime
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int


class ReadyReader:
    """Everything on runs.ready from the beginning, with arrival times, read in a thread."""

    def __init__(self, settings: Settings) -> None:
        topic = TopicCatalog(settings.topic_prefix).ready
        self._consumer = Consumer(consumer_config(settings, f"test-{uuid.uuid4().hex}"))
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.arrivals: list[Arrival] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.05)
            if msg is None or msg.error() is not None:
                continue
            headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
            try:
                run: RunEvent | None = RUN_EVENTS.decode(msg.value(), headers)
            except CodecError:
                run = None
            arrived_at = datetime.now(UTC)
            created_ms = msg.timestamp()[1]
            self.arrivals.append(
                Arrival(
                    run,
                    msg.key(),
                    created_ms,
                    arrived_at,
                    msg.value(),
                    headers,
                    msg.partition() or 0,
                )
            )

    def of(self, run: RunEvent) -> list[Arrival]:
        return self.keyed(str(run.run_id).encode())

    def keyed(self, key: bytes) -> list[Arrival]:
        return [a for a in list(self.arrivals) if a.key == key]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


@pytest.fixture
def ready(settings: Settings) -> Iterator[ReadyReader]:
    reader = ReadyReader(settings)
    try:
        yield reader
    finally:
        reader.close()


def new_run(due_at: datetime, target_service: str = "billing-api") -> RunEvent:
    return RunEvent(
        run_id=uuid.uuid4(),
        job_id=f"job-{uuid.uuid4().hex[:6]}",
        tenant="acme",
        scheduled_for=due_at,
        due_at=due_at,
        attempt=1,
        max_attempts=3,
        target_service=target_service,
        target=HttpTarget(url="https://example.com/hook"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
    )


class Publisher:
    """Produce to the due topics and learn each record's (topic, partition, offset)."""

    def __init__(self, settings: Settings) -> None:
        self.catalog = TopicCatalog(settings.topic_prefix)
        self._producer = Producer(producer_config(settings, **{"linger.ms": 0}))
        #: key -> (topic, partition, offset) of each record sent with it, in delivery order
        self.placed: dict[bytes, list[tuple[str, int, int]]] = {}

    def send(
        self,
        tier: str,
        value: bytes | None,
        key: bytes,
        partition: int | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            self.placed.setdefault(key, []).append((msg.topic(), msg.partition(), msg.offset()))

        self._producer.produce(
            self.catalog.due(tier),
            value,
            key,
            partition=-1 if partition is None else partition,  # -1: the partitioner picks
            headers=headers
            if headers is not None
            else (RUN_EVENTS.headers() if value is not None else []),
            on_delivery=report,
        )

    def run(self, tier: str, run: RunEvent, partition: int | None = None) -> tuple[str, int, int]:
        key = str(run.run_id).encode()
        self.send(tier, RUN_EVENTS.encode(run), key, partition)
        self.flush()
        return self.placed[key][-1]

    def flush(self) -> None:
        assert self._producer.flush(10) == 0


def committed(settings: Settings, place: tuple[str, int]) -> int:
    """The dispatcher group's committed offset for one partition (-1001: none)."""
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}dispatcher"))
    try:
        [tp] = consumer.committed([TopicPartition(*place)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def assert_on_time(arrival: Arrival) -> None:
    assert arrival.run is not None
    due = arrival.run.due_at
    # CreateTime has millisecond resolution: the release instant floored to the millisecond.
    assert arrival.created_ms >= math.floor(due.timestamp() * 1000), "released before due_at"
    assert arrival.arrived_at - due <= LATE_BOUND, f"late by {arrival.arrived_at - due}"


def test_releases_each_run_once_on_time_and_survives_poison(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    dispatcher = dispatchers()
    dispatcher.wait_event("dispatcher.started")
    out = Publisher(settings)

    now = datetime.now(UTC)
    garbage_key = b"not-a-run"
    out.send("10s", b"\x02\x99 definitely not avro", garbage_key)
    out.send("10s", None, b"tombstone")
    runs = [new_run(now + timedelta(seconds=2.0 + 0.1 * n)) for n in range(20)]
    for n, run in enumerate(runs):
        value = RUN_EVENTS.encode(run)
        out.send("10s", value, str(run.run_id).encode())
        if n % 5 == 0:  # duplicates: the same record twice on its topic, once on another tier
            out.send("10s", value, str(run.run_id).encode())
            out.send("5m", value, str(run.run_id).encode())
    far = new_run(now + timedelta(seconds=3.5), target_service="reports")
    out.send("5m", RUN_EVENTS.encode(far), str(far.run_id).encode())
    out.flush()
    expected = [*runs, far]

    wait_for(lambda: all(ready.of(run) for run in expected), "every run on runs.ready")
    time.sleep(1.0)  # room for a duplicate to show up
    for run in expected:
        arrivals = ready.of(run)
        assert len(arrivals) == 1, f"{run.run_id} released {len(arrivals)} times"
        assert_on_time(arrivals[0])
        assert arrivals[0].key == str(run.run_id).encode()  # keyed by run, not by target
        assert arrivals[0].run == run
    assert len(ready.arrivals) == len(expected)

    assert len(dispatcher.events("run.duplicate")) == 8
    undecodable = dispatcher.events("run.undecodable")
    assert len(undecodable) == 2
    [(topic, partition, offset)] = out.placed[garbage_key]
    assert dispatcher.events(
        "run.undecodable", f"topic={topic} partition={partition} offset={offset}"
    )
    released = dispatcher.events("run.released")
    assert len(released) == len(expected)
    assert all(float(line.split("lateness_ms=")[1].split()[0]) >= 0 for line in released)

    assert dispatcher.stop() == 0
    stopped = dispatcher.wait_event("dispatcher.stopped")
    assert "released=21 " in stopped and "duplicates=8 " in stopped and "undecodable=2 " in stopped


def test_a_run_for_an_http_target_without_limits_is_released_claim_ahead_early(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """docs/claim-ahead.md: released ``claim_ahead`` before its due instant, never sooner."""
    dispatcher = dispatchers(DUETIME_DISPATCHER_CLAIM_AHEAD="2")
    dispatcher.wait_event("dispatcher.started")
    out = Publisher(settings)
    run = new_run(datetime.now(UTC) + timedelta(seconds=4))
    out.run("10s", run)
    wait_for(lambda: bool(ready.of(run)), "the run on runs.ready")
    [arrival] = ready.of(run)
    released_at = datetime.fromtimestamp(arrival.created_ms / 1000, UTC)
    ahead = run.due_at - timedelta(seconds=2)
    assert released_at >= ahead - timedelta(milliseconds=1), "released before due_at - 2 s"
    assert arrival.arrived_at - ahead <= LATE_BOUND
    assert arrival.arrived_at < run.due_at
    [line] = dispatcher.events("run.released")
    assert float(line.split("lateness_ms=")[1].split()[0]) < 0


def test_a_held_run_survives_kill_9(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """Offsets are committed only up to released runs, so a killed dispatcher loses nothing."""
    first = dispatchers()
    first.wait_event("dispatcher.started")
    out = Publisher(settings)

    now = datetime.now(UTC)
    held = new_run(now + timedelta(seconds=20))
    behind = new_run(now + timedelta(seconds=1))  # same partition, later offset, due first
    topic, partition, held_offset = out.run("5m", held, partition=0)
    assert out.run("5m", behind, partition=0) == (topic, partition, held_offset + 1)

    first.wait_event("run.held", f"run_id={held.run_id}")
    wait_for(lambda: bool(ready.of(behind)), "the run behind the held one to be released")
    assert_on_time(ready.of(behind)[0])
    time.sleep(2.5)  # more than the 1 s commit interval: whatever may be committed now is
    offset = committed(settings, (topic, partition))
    assert offset <= held_offset, f"committed {offset} past the held run at {held_offset}"
    assert not ready.of(held)

    first.stop(signal.SIGKILL)
    second = dispatchers()
    # The group waits for the killed member to time out before the new one gets partitions.
    second.wait_event("dispatcher.started")
    started_at = datetime.now(UTC)
    second.wait_event("run.held", f"run_id={held.run_id}")
    wait_for(lambda: bool(ready.of(held)), "the held run after the restart")
    [arrival] = ready.of(held)
    if started_at < held.due_at - timedelta(seconds=0.5):
        assert_on_time(arrival)
    else:  # a slow restart on a loaded machine: late is allowed, early never
        assert arrival.created_ms >= math.floor(held.due_at.timestamp() * 1000)
    # At-least-once, visibly: the record behind the held run was released but could not be
    # committed past it, so the restarted dispatcher released it again (workers dedup by claim).
    assert len(ready.of(behind)) == 2
    assert second.stop() == 0


def routed_headers(
    run: RunEvent, *, due_at: datetime | None = None, sent_at: datetime | None = None
) -> list[tuple[str, str | bytes | None]]:
    """The headers the planner puts on a due record."""
    kind = "kafka" if isinstance(run.target, KafkaTarget) else "http"
    return [
        *routing_headers(
            run.run_id, run.attempt, due_at or run.due_at, kind, sent_at or datetime.now(UTC)
        ),
        *RUN_EVENTS.headers(),
    ]


def test_routes_from_headers_and_forwards_the_record_untouched(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """The routing headers decide when a record is released, its bytes and headers go on as
    they came, and runs.ready is keyed by run_id, so one target spreads over its partitions."""
    dispatcher = dispatchers()
    dispatcher.wait_event("dispatcher.started")
    out = Publisher(settings)
    now = datetime.now(UTC)
    # The value says "due in an hour"; the header says 2 s: the header wins (nothing decodes it).
    runs = [new_run(now + timedelta(hours=1)) for _ in range(24)]
    due_at = now + timedelta(seconds=2)
    sent: dict[bytes, list[tuple[str, str | bytes | None]]] = {}
    for run in runs:
        key = str(run.run_id).encode()
        sent[key] = routed_headers(run, due_at=due_at)
        out.send("10s", RUN_EVENTS.encode(run), key, headers=sent[key])
    # Not Avro at all, but routed by its headers: forwarded byte for byte (the worker judges it).
    opaque = new_run(now)
    opaque_key = str(opaque.run_id).encode()
    sent[opaque_key] = routed_headers(opaque, due_at=due_at)
    out.send("10s", b"opaque bytes", opaque_key, headers=sent[opaque_key])
    # Neither routing headers nor Avro: poison, acked past.
    out.send("10s", b"\x02\x99 garbage", b"poison", headers=[])
    out.flush()

    wait_for(lambda: all(ready.keyed(key) for key in sent), "every routed record on runs.ready")
    for key, headers in sent.items():
        [arrival] = ready.keyed(key)
        assert arrival.created_ms >= epoch_ms(due_at), "released before the header's due_at"
        assert arrival.arrived_at - due_at <= LATE_BOUND
        # The headers as sent, then the dispatcher's stamps: released when due, not throttled.
        assert arrival.headers[: len(headers)] == [(k, v) for k, v in headers]
        released_at, throttled_ms = read_release(arrival.headers[len(headers) :])
        assert len(arrival.headers) == len(headers) + 2
        assert released_at is not None and released_at >= due_at - timedelta(milliseconds=1)
        assert throttled_ms == 0
    for run in runs:
        assert ready.of(run)[0].value == RUN_EVENTS.encode(run)
    assert ready.keyed(opaque_key)[0].value == b"opaque bytes"
    # One busy target ("billing-api" for all of them) lands on more than one partition.
    partitions = {ready.keyed(key)[0].partition for key in sent}
    assert len(partitions) > 1
    dispatcher.wait_event("run.undecodable")
    batch = dispatcher.wait_event("runs.released")
    assert "count=" in batch and "lateness_max_ms=" in batch


def test_judges_due_instants_by_the_database_clock(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """The planner says its database clock is 3 s ahead of this host: the dispatcher measures
    that, says so, and releases at the database's due instant (3 s early by this host's clock)."""
    dispatcher = dispatchers()
    dispatcher.wait_event("dispatcher.started")
    out = Publisher(settings)
    skew = timedelta(seconds=3)

    def send_skewed(run: RunEvent) -> None:
        headers = routed_headers(run, sent_at=datetime.now(UTC) + skew)
        out.send("10s", RUN_EVENTS.encode(run), str(run.run_id).encode(), headers=headers)
        out.flush()

    send_skewed(new_run(datetime.now(UTC) + skew + timedelta(hours=1)))
    warning = dispatcher.wait_event("clock.skew")
    offset_ms = int(warning.split("offset_ms=")[1].split()[0])
    assert -3000 <= offset_ms < -2000  # an upper bound on (local - database): -3 s + transit

    db_due_at = datetime.now(UTC) + skew + timedelta(seconds=2)
    run = new_run(db_due_at)
    send_skewed(run)
    wait_for(lambda: bool(ready.of(run)), "the run on runs.ready")
    [arrival] = ready.of(run)
    local_due_ms = epoch_ms(db_due_at - skew)
    assert arrival.created_ms >= local_due_ms, "released before the database's due instant"
    assert arrival.arrived_at < db_due_at - timedelta(seconds=1)  # not by this host's clock
    dispatcher.wait_event("dispatcher.stats", "clock_correction_ms=-", timeout=20)


def kafka_run(store: Store, topic: str, due_at: datetime) -> RunEvent:
    """A scheduled run row of a Kafka-target job (as the planner stores it), and its RunEvent."""
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    run_id = run_id_for(job_id, due_at)
    with store.tx() as tx:
        tx.runs_ensure_partition(due_at.date())
        tx.runs_insert([NewRun(run_id, job_id, "acme", f"kafka:{topic}", due_at, due_at, 3)])
    return RunEvent(
        run_id=run_id,
        job_id=job_id,
        tenant="acme",
        scheduled_for=due_at,
        due_at=due_at,
        attempt=1,
        max_attempts=3,
        target_service=f"kafka:{topic}",
        target=KafkaTarget(topic=topic, key=f"key-{job_id}", value=f'{{"job": "{job_id}"}}'),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
    )


def read_all(settings: Settings, topic: str, until: Callable[[list[Any]], bool]) -> list[Any]:
    """Records of ``topic`` from the beginning, until ``until(records)`` (or WAIT)."""
    consumer = Consumer(consumer_config(settings, f"test-{uuid.uuid4().hex}"))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Any] = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not until(records):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                records.append(msg)
        return records
    finally:
        consumer.close()


def test_kafka_targets_are_emitted_by_the_dispatcher_and_recorded_in_batches(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """A Kafka-target run reaches its own topic at its due instant with the idempotency headers,
    its run row says succeeded with one attempt row, and a result is published; no worker is
    involved. A run whose topic is refused goes to runs.ready for a worker to end it."""
    store = Store(settings.database_url, pool_size=1)
    user_topic = f"user-{uuid.uuid4().hex[:8]}"
    create_topics(settings, [TopicSpec(user_topic, 1)])
    dispatcher = dispatchers()
    dispatcher.wait_event("dispatcher.started")
    out = Publisher(settings)

    due_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    runs = [kafka_run(store, user_topic, due_at + timedelta(milliseconds=n)) for n in range(5)]
    forged = kafka_run(store, TopicCatalog(settings.topic_prefix).ready, due_at)
    for run in [*runs, forged]:
        key = str(run.run_id).encode()
        out.send("10s", RUN_EVENTS.encode(run), key, headers=routed_headers(run))
    # One without routing headers takes the fast path too (decoded from its value).
    legacy = kafka_run(store, user_topic, due_at + timedelta(milliseconds=10))
    out.send("10s", RUN_EVENTS.encode(legacy), str(legacy.run_id).encode())
    out.flush()
    runs.append(legacy)

    records = read_all(settings, user_topic, lambda got: len(got) >= len(runs))
    by_run = {dict(r.headers())["X-Duetime-Run-Id"].decode(): r for r in records}
    assert len(records) == len(runs) == len(by_run)
    for run in runs:
        record = by_run[str(run.run_id)]
        assert isinstance(run.target, KafkaTarget)
        assert run.target.key is not None and record.key() == run.target.key.encode()
        assert record.value() == run.target.value.encode()
        assert record.timestamp()[1] >= epoch_ms(run.due_at), "emitted before due_at"
        headers = dict(record.headers())
        assert headers["Idempotency-Key"] == f"{run.run_id}:1".encode()
        assert headers["X-Duetime-Attempt"] == b"1"
        # The fast path's token for attempt 1, below a worker's (2) should the run fall back.
        assert headers["X-Duetime-Fencing-Token"] == b"1"
        assert headers["X-Duetime-Scheduled-For"] == format_instant(run.scheduled_for).encode()

    def row(run: RunEvent) -> Any:
        [found] = [r for r in store.runs_list(run.job_id) if r.run_id == run.run_id]
        return found

    wait_for(lambda: all(row(run).state == "succeeded" for run in runs), "the runs recorded")
    for run in runs:
        found = row(run)
        assert found.attempt == 1 and found.worker.startswith("dispatcher:")
        # Released when due, not throttled (no limits): the lateness is accounted on the row.
        assert found.released_at >= run.due_at - timedelta(milliseconds=1)
        assert found.throttled_ms == 0
        [attempt] = store.run_attempts_list(run.run_id)
        assert (attempt.attempt, attempt.outcome) == (1, "succeeded")
        # The attempt keeps its own release figures, as the run row does for its latest.
        assert (attempt.due_at, attempt.released_at) == (run.due_at, found.released_at)
        assert attempt.throttled_ms == 0
        # It started when emitted and ended when the broker acknowledged the record.
        assert (attempt.worker, attempt.started_at) == (found.worker, found.released_at)
        assert attempt.finished_at == found.finished_at >= attempt.started_at
        took_ms = (found.finished_at - found.released_at).total_seconds() * 1000
        assert abs(attempt.duration_ms - took_ms) <= 1
    # One write per run: the attempt is the run row (emitted), not a run_attempts row.
    with store.engine.begin() as conn:
        stored = conn.execute(
            text("SELECT count(*) FROM run_attempts WHERE run_id = ANY(:r)"),
            {"r": [run.run_id for run in runs]},
        ).scalar_one()
        emitted = conn.execute(
            text("SELECT count(*) FROM runs WHERE emitted AND run_id = ANY(:r)"),
            {"r": [run.run_id for run in runs]},
        ).scalar_one()
    assert (stored, emitted) == (0, len(runs))
    results = read_all(
        settings, TopicCatalog(settings.topic_prefix).results, lambda got: len(got) >= len(runs)
    )
    decoded = [RUN_RESULTS.decode(r.value(), r.headers()) for r in results]
    assert {r.run_id for r in decoded} == {run.run_id for run in runs}
    assert {(r.outcome, r.state) for r in decoded} == {("succeeded", "succeeded")}

    # The refused topic: forwarded untouched to runs.ready, the row left for the worker.
    wait_for(lambda: bool(ready.of(forged)), "the refused run on runs.ready")
    assert ready.of(forged)[0].run == forged
    assert row(forged).state == "scheduled"
    assert all(not ready.of(run) for run in runs)
    dispatcher.wait_event("run.emit_skipped", f"run_id={forged.run_id}")
    store.close()


def test_a_late_kafka_run_already_recorded_is_acked_not_emitted_again(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
) -> None:
    """A Kafka-target record read after its due instant (as after a restart that re-reads what
    was emitted but not yet committed) is looked up first: a run the database already records
    past that attempt is acked without an emit; one still scheduled is emitted."""
    store = Store(settings.database_url, pool_size=1)
    user_topic = f"user-{uuid.uuid4().hex[:8]}"
    create_topics(settings, [TopicSpec(user_topic, 1)])
    dispatcher = dispatchers()
    dispatcher.wait_event("dispatcher.started")
    due_at = (datetime.now(UTC) - timedelta(seconds=5)).replace(microsecond=0)
    done, retried, pending = (kafka_run(store, user_topic, due_at) for _ in range(3))
    with store.engine.begin() as conn:  # done: emitted and recorded; retried: attempt 2 is next
        conn.execute(
            text("UPDATE runs SET state = 'succeeded', attempt = 1 WHERE run_id = :r"),
            {"r": done.run_id},
        )
        conn.execute(text("UPDATE runs SET attempt = 1 WHERE run_id = :r"), {"r": retried.run_id})
    out = Publisher(settings)
    for run in (done, retried, pending):
        out.send(
            "10s", RUN_EVENTS.encode(run), str(run.run_id).encode(), headers=routed_headers(run)
        )
    out.flush()

    dispatcher.wait_event("runs.already_handled", "count=2", "asked=3")
    records = read_all(settings, user_topic, lambda got: len(got) >= 1)
    emitted = {dict(r.headers())["X-Duetime-Run-Id"].decode() for r in records}
    assert emitted == {str(pending.run_id)}
    dispatcher.wait_event("dispatcher.stats", "already_handled=2")
    store.close()


def test_the_intake_pauses_at_the_cap_and_loses_nothing(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    """With a cap of 100 held runs and 400 published, the intake stops at the cap, releases go
    on, the intake resumes at the low-water mark, and every run is released once."""
    dispatcher = dispatchers(DUETIME_DISPATCHER_MAX_HELD="100")
    dispatcher.wait_event("dispatcher.started", "max_held=100")
    out = Publisher(settings)
    now = datetime.now(UTC)
    runs = [new_run(now + timedelta(seconds=6 + n * 0.01)) for n in range(400)]
    for run in runs:
        out.send(
            "10s", RUN_EVENTS.encode(run), str(run.run_id).encode(), headers=routed_headers(run)
        )
    out.flush()
    dispatcher.wait_event("intake.paused")
    dispatcher.wait_event("intake.resumed")
    wait_for(lambda: all(ready.of(run) for run in runs), "every run released", timeout=60)
    for run in runs:
        [arrival] = ready.of(run)
        assert arrival.created_ms >= epoch_ms(run.due_at), "released before due_at"


def test_stops_within_its_grace_when_the_broker_is_gone(database_url: str, tmp_path: Path) -> None:
    """With its broker gone, faust's consumer thread can wait for it forever on a stop; the
    dispatcher ends anyway once its stop grace (5 s) is over. A broker of its own, so that no
    other test loses the session's broker."""
    broker = KafkaBroker(tmp_path / "broker", die_with_owner=True)
    broker.start()
    try:
        settings = Settings(
            database_url=database_url,
            kafka_bootstrap=broker.url,
            topic_prefix=f"d{uuid.uuid4().hex[:8]}.",
            profile="local",
            data_dir=tmp_path / "data",
        )
        create_topics(settings)
        dispatcher = DispatcherProcess(settings)
        try:
            dispatcher.wait_event("partitions.assigned")
            # The fault as measured: a dispatcher that had run for a few seconds, then lost its
            # broker for ten, never finished a stop (killed right after the assignment, it did).
            time.sleep(8)
            broker.kill()
            time.sleep(10)
            began = time.monotonic()
            dispatcher.proc.send_signal(signal.SIGTERM)
            dispatcher.proc.wait(5.0 + 5.0)
            took = time.monotonic() - began
        finally:
            dispatcher.stop(signal.SIGKILL)
        assert took < 5.0 + 3.0, dispatcher.log()
        assert dispatcher.proc.returncode in (0, 70), dispatcher.log()
    finally:
        broker.kill()
