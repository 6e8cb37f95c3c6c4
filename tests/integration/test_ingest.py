"""The jobs-topic ingest loses nothing (issue: "job-definition ingest that loses nothing").

- A record that decodes and validates but that PostgreSQL refuses goes to jobs.rejected alone,
  with PostgreSQL's reason; the rest of its batch is stored.
- A database that fails mid-batch: the batch is read again once it is back, not skipped.
- A broker that fails to take a rejection: the batch is read again, not committed past.
- A record on the topic is held to the same numeric bounds as a job file, and may not name one
  of duetime's own topics as its Kafka target.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from sqlalchemy import text
from sqlalchemy.engine import make_url

from duetime.bus.kafka import consumer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import BusError, StoreError
from duetime.jobdef import parse_job
from duetime.model import KafkaTarget
from duetime.shard_map import ShardMap
from duetime.store import Store
from duetime.store.clusters import ClusterStores
from duetime_planner.ingest import IngestStats, JobIngest

pytestmark = pytest.mark.integration


def _job(job_id: str, **extra: Any) -> Any:
    return parse_job(
        {
            "id": job_id,
            "schedule": {"interval": "PT1M"},
            "target": {"kafka": {"topic": "events", "value": "{}"}},
            "version": 1,
            **extra,
        }
    )


def _produce(producer: Producer, catalog: TopicCatalog, jobs: list[Any]) -> None:
    for job in jobs:  # one partition: the batch order is the produce order
        producer.produce(
            catalog.jobs,
            JOB_DEFINITIONS.encode(job),
            job.job_id.encode(),
            partition=0,
            headers=JOB_DEFINITIONS.headers(),
        )
    producer.flush(10)


def _ingest(settings: Settings, producer: Any, catalog: TopicCatalog) -> JobIngest:
    """The ingest of the planner-ingest group on this test's one database (one cluster)."""
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}planner-ingest"))
    clusters = ClusterStores(ShardMap.single(settings.require_database()), pool_size=2)
    return JobIngest(clusters, consumer, producer, catalog)


def _ingest_until(ingest: JobIngest, records: int) -> IngestStats:
    accepted = rejected = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while accepted + rejected < records and datetime.now(UTC) < deadline:
        stats = ingest.run_once(timeout=0.5)
        accepted, rejected = accepted + stats.accepted, rejected + stats.rejected
    return IngestStats(accepted=accepted, rejected=rejected)


def _rejections(settings: Settings, catalog: TopicCatalog, expected: int) -> list[Any]:
    consumer = Consumer(consumer_config(settings, f"test-{uuid.uuid4().hex}"))
    consumer.subscribe([catalog.jobs_rejected])
    found: list[Any] = []
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while len(found) < expected and datetime.now(UTC) < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            found.append(JOB_REJECTIONS.decode(msg.value(), msg.headers()))
    consumer.close()
    return found


def _stored(store: Store) -> list[str]:
    with store.engine.begin() as conn:
        return sorted(conn.execute(text("SELECT job_id FROM jobs")).scalars())


def test_a_record_postgresql_refuses_is_rejected_alone_and_the_batch_is_stored(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    # Valid by every rule of a job, but PostgreSQL stores no NUL character in text or JSON.
    nul = _job("nul")
    nul = replace(nul, target=KafkaTarget(topic="events", value='{"a": "\x00"}', key=None))
    _produce(producer, catalog, [_job("before"), nul, _job("after")])
    ingest = _ingest(settings, producer, catalog)
    assert _ingest_until(ingest, 3) == IngestStats(accepted=2, rejected=1)
    assert ingest.run_once(timeout=0.5) == IngestStats()  # and the offsets moved past all three
    ingest.consumer.close()
    assert _stored(store) == ["after", "before"]
    (rejected,) = _rejections(settings, catalog, 1)
    assert rejected.key == b"nul" and rejected.source_offset == 1
    assert rejected.value == JOB_DEFINITIONS.encode(nul)
    assert "database refused the data" in rejected.reason


def test_a_batch_the_database_fails_to_store_is_read_again_not_lost(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    database = make_url(settings.database_url).database
    _produce(producer, catalog, [_job(f"kept-{n}") for n in range(5)])
    # Every new session of this database is read-only: the write fails, for a reason that has
    # nothing to do with the records.
    with store.engine.begin() as conn:
        conn.execute(text(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on'))
    ingest = _ingest(settings, producer, catalog)
    failures = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while failures < 2 and datetime.now(UTC) < deadline:
        try:
            ingest.run_once(timeout=0.5)
        except StoreError:
            failures += 1  # the planner loop logs it and tries again after a pause
    assert failures == 2  # the same batch, twice: it was not skipped after the first failure
    with store.engine.begin() as conn:
        conn.execute(text("SET transaction_read_only = off"))
        conn.execute(text(f'ALTER DATABASE "{database}" RESET default_transaction_read_only'))
    ingest.clusters.home.engine.dispose()
    assert _ingest_until(ingest, 5) == IngestStats(accepted=5, rejected=0)
    ingest.consumer.close()
    assert _stored(store) == [f"kept-{n}" for n in range(5)]


def test_a_record_is_held_to_the_bounds_of_a_job_file(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    base = _job("bounded")
    out_of_bounds = [
        replace(
            base,
            job_id="lease-1ms",
            lease=timedelta(milliseconds=1),
            heartbeat_interval=timedelta(0),
        ),
        replace(base, job_id="catch-up-huge", max_catch_up=2**31 - 1),
        replace(base, job_id="heartbeat-0", heartbeat_interval=timedelta(0)),
    ]
    _produce(producer, catalog, [*out_of_bounds, base])
    ingest = _ingest(settings, producer, catalog)
    assert _ingest_until(ingest, 4) == IngestStats(accepted=1, rejected=3)
    ingest.consumer.close()
    assert _stored(store) == ["bounded"]
    reasons = {r.key.decode(): (r.field, r.reason) for r in _rejections(settings, catalog, 3)}
    assert reasons == {
        "lease-1ms": ("job.lease_seconds", "must be between 1 and 3600, not 0.001"),
        "catch-up-huge": ("job.max_catch_up", "must be between 1 and 10000, not 2.14748e+09"),
        "heartbeat-0": ("job.heartbeat_seconds", "must be between 0.1 and 1200, not 0"),
    }


class _RejectionsLost:
    """The real producer, except that the first ``failures`` records produced onto
    ``topic`` are never sent: their delivery report comes back with an error, as from a broker
    that did not take them in time. Deterministic, unlike a broker stopped mid-test."""

    def __init__(self, inner: Producer, topic: str, failures: int) -> None:
        self.inner, self.topic, self.failures = inner, topic, failures

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        if topic == self.topic and self.failures > 0:
            self.failures -= 1
            kwargs["on_delivery"](KafkaError(KafkaError._MSG_TIMED_OUT), None)
            return
        self.inner.produce(topic, value, key, **kwargs)

    def poll(self, timeout: float) -> int:
        return self.inner.poll(timeout)

    def flush(self, timeout: float) -> int:
        return self.inner.flush(timeout)


def test_a_batch_whose_rejection_the_broker_did_not_take_is_read_again(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    bad = replace(_job("bad"), heartbeat_interval=timedelta(0))
    _produce(producer, catalog, [_job("first"), bad, _job("last")])
    ingest = _ingest(settings, _RejectionsLost(producer, catalog.jobs_rejected, 1), catalog)
    failed = False
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while not failed and datetime.now(UTC) < deadline:
        try:
            ingest.run_once(timeout=0.5)
        except BusError as exc:
            assert "could not publish 1 rejections" in str(exc)
            failed = True  # the planner loop logs it and tries again after a pause
    assert failed
    # Nothing committed: a restarted planner would read the batch again too.
    (committed,) = ingest.consumer.committed([TopicPartition(catalog.jobs, 0)], timeout=10)
    assert committed.offset < 0
    # The next round reads the same three records: the rejection is sent this time, the two
    # stored ones come back unchanged, and the offsets move past all three.
    assert _ingest_until(ingest, 3) == IngestStats(accepted=2, rejected=1)
    assert ingest.run_once(timeout=0.5) == IngestStats()
    ingest.consumer.close()
    assert _stored(store) == ["first", "last"]
    (rejected,) = _rejections(settings, catalog, 1)
    assert (rejected.key, rejected.source_offset) == (b"bad", 1)
    assert rejected.field == "job.heartbeat_seconds"


def test_a_record_naming_one_of_duetimes_own_topics_is_rejected(
    env: tuple[Settings, Store, Producer],
) -> None:
    """The validation the topic shares with job files: with an empty topic prefix ``jobs`` and
    ``runs.*`` are duetime's own topics, so they are refused whatever this deployment's prefix."""
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    own = [
        replace(_job(job_id), target=KafkaTarget(topic=topic, value="{}", key=None))
        for job_id, topic in (("to-jobs", "jobs"), ("to-runs", "runs.ready"))
    ]
    _produce(producer, catalog, [*own, _job("fine")])
    ingest = _ingest(settings, producer, catalog)
    assert _ingest_until(ingest, 3) == IngestStats(accepted=1, rejected=2)
    ingest.consumer.close()
    assert _stored(store) == ["fine"]
    reasons = {r.key.decode(): (r.field, r.reason) for r in _rejections(settings, catalog, 2)}
    assert set(reasons) == {"to-jobs", "to-runs"}
    for field, reason in reasons.values():
        assert field == "job.target.kafka.topic"
        assert "is reserved" in reason and "duetime's own topics" in reason
