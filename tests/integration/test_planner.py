"""The planner on the real stack: due scan -> runs -> outbox publish; jobs-topic ingest."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import text

from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS, RUN_EVENTS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.ingest import JobIngest
from duetime_planner.planner import Planner

pytestmark = pytest.mark.integration


@pytest.fixture
def env(database_url: str, stack: Any) -> Iterator[tuple[Settings, Store, Producer]]:
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"p{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    store = Store(database_url, pool_size=2)
    producer = Producer(producer_config(settings))
    yield settings, store, producer
    store.close()


def _consume_all(settings: Settings, topics: list[str], expected: int) -> list[Any]:
    consumer = Consumer(consumer_config(settings, f"test-{uuid.uuid4().hex}"))
    consumer.subscribe(topics)
    found: list[Any] = []
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while len(found) < expected and datetime.now(UTC) < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            found.append(msg)
    consumer.close()
    return found


def _job(job_id: str, **extra: Any) -> Any:
    return parse_job(
        {
            "id": job_id,
            "schedule": {"interval": "PT1S"},
            "target": {"http": {"url": "https://example.com/hook"}},
            **extra,
        }
    )


def test_plans_due_runs_publishes_them_and_is_idempotent(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    with store.tx() as tx:
        jobs_apply(tx, [_job("a"), _job("b", tenant="team-b")])
    planner = Planner(store, producer, catalog, PlannerConfig(lookahead=timedelta(seconds=3)))
    planner.ensure_partitions(datetime.now(UTC).date())
    stats = planner.run_once()
    assert stats.jobs_planned == 2
    assert stats.runs_created >= 4  # 1 s interval, 3 s lookahead, two jobs
    assert stats.runs_published == stats.runs_created
    # A second round right away has nothing new to create or publish.
    again = planner.run_once()
    assert again.runs_created <= 2 and again.runs_published == again.runs_created
    with store.engine.begin() as conn:
        rows = conn.execute(
            text("SELECT run_id, job_id, scheduled_for, published_at FROM runs")
        ).all()
    assert all(r.published_at is not None for r in rows)
    messages = _consume_all(settings, list(catalog.due_topics), len(rows))
    decoded = [RUN_EVENTS.decode(m.value(), m.headers()) for m in messages]
    assert {d.run_id for d in decoded} == {r.run_id for r in rows}
    assert all(d.attempt == 1 for d in decoded)
    by_run = {r.run_id: r for r in rows}
    for event in decoded:
        assert event.scheduled_for == by_run[event.run_id].scheduled_for


def test_ingest_upserts_by_version_and_rejects_bad_records(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    v2 = _job("ingested", version=2)
    v1 = _job("ingested", version=1, paused=True)
    for job in (v2, v1):
        producer.produce(
            catalog.jobs,
            JOB_DEFINITIONS.encode(job),
            job.job_id.encode(),
            headers=JOB_DEFINITIONS.headers(),
        )
    producer.produce(catalog.jobs, b"\x02garbage", b"poison")
    producer.flush(10)
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}ingest"))
    ingest = JobIngest(store, consumer, producer, catalog)
    total_accepted = total_rejected = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while total_accepted + total_rejected < 3 and datetime.now(UTC) < deadline:
        stats = ingest.run_once(timeout=0.5)
        total_accepted += stats.accepted
        total_rejected += stats.rejected
    consumer.close()
    assert (total_accepted, total_rejected) == (2, 1)
    with store.engine.begin() as conn:
        job = conn.execute(text("SELECT version, paused FROM jobs WHERE job_id='ingested'")).one()
    assert (job.version, job.paused) == (2, False)  # the older version 1 did not overwrite
    rejected = _consume_all(settings, [catalog.jobs_rejected], 1)
    assert len(rejected) == 1
    record = JOB_REJECTIONS.decode(rejected[0].value(), rejected[0].headers())
    assert record.key == b"poison" and record.value == b"\x02garbage"
    assert "not valid Avro" in record.reason
