"""The jobs-topic guard on a real broker and PostgreSQL: with DUETIME_JOBS_TOPIC_SECRET set, the
planner's ingest stores only records signed for their own tenant, and sends every other one to
jobs.rejected (field ``tenant``): unsigned, forged, signed for another tenant, or changing a job
stored in another tenant."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import text

from duetime.bus.kafka import consumer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.jobs_guard import signature_headers, tenant_key
from duetime.model import JobDefinition
from duetime.shard_map import ShardMap
from duetime.store import Store
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply
from duetime_planner.guard import JobsTopicGuard
from duetime_planner.ingest import JobIngest

pytestmark = pytest.mark.integration

SECRET = "operator-secret-for-the-jobs-topic"


def _job(job_id: str, tenant: str) -> JobDefinition:
    return parse_job(
        {
            "id": job_id,
            "tenant": tenant,
            "schedule": {"cron": "0 3 * * *"},
            "target": {"http": {"url": "https://example.com/hook"}},
            "version": 1,
        }
    )


def test_only_records_signed_for_their_own_tenant_are_stored(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    with store.tx() as tx:
        jobs_apply(tx, [_job("acme-owned", "acme")])
    acme, globex = tenant_key(SECRET, "acme"), tenant_key(SECRET, "globex")

    def send(item: JobDefinition | JobTombstone, signer: tuple[str, str] | None) -> None:
        value, key = JOB_DEFINITIONS.encode(item), item.job_id.encode()
        headers: list[tuple[str, Any]] = list(JOB_DEFINITIONS.headers())
        if signer is not None:
            headers += signature_headers(signer[1], signer[0], key, value)
        producer.produce(catalog.jobs, value, key, headers=headers)

    send(_job("acme-new", "acme"), ("acme", acme))  # stored
    send(_job("unsigned", "acme"), None)
    send(_job("forged", "acme"), ("acme", globex))  # globex's key, claiming acme
    send(_job("cross", "acme"), ("globex", globex))  # signed for globex, a job of acme
    send(_job("acme-owned", "globex"), ("globex", globex))  # taking acme's job id
    send(JobTombstone("acme-owned", 99), ("globex", globex))  # deleting acme's job
    send(_job("globex-new", "globex"), ("globex", globex))  # stored
    producer.flush(10)

    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}ingest"))
    ingest = JobIngest(
        ClusterStores(ShardMap.single(settings.require_database()), pool_size=2),
        consumer,
        producer,
        catalog,
        guard=JobsTopicGuard(SECRET),
    )
    accepted = rejected = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while accepted + rejected < 7 and datetime.now(UTC) < deadline:
        stats = ingest.run_once(timeout=0.5)
        accepted, rejected = accepted + stats.accepted, rejected + stats.rejected
    consumer.close()
    assert (accepted, rejected) == (2, 5)

    with store.engine.begin() as conn:
        rows = conn.execute(text("SELECT job_id, tenant, version FROM jobs ORDER BY job_id"))
        jobs = [tuple(r) for r in rows]
    assert jobs == [("acme-new", "acme", 1), ("acme-owned", "acme", 1), ("globex-new", "globex", 1)]

    consumer = Consumer(consumer_config(settings, f"test-{uuid.uuid4().hex}"))
    consumer.subscribe([catalog.jobs_rejected])
    found = []
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while len(found) < 5 and datetime.now(UTC) < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            found.append(JOB_REJECTIONS.decode(msg.value(), msg.headers()))
    consumer.close()
    reasons = sorted((r.key.decode(), r.field, r.reason) for r in found)
    assert [(key, field) for key, field, _ in reasons] == [
        ("acme-owned", "tenant"),
        ("acme-owned", "tenant"),
        ("cross", "tenant"),
        ("forged", "tenant"),
        ("unsigned", "tenant"),
    ]
    by_key = {key: reason for key, _, reason in reasons}
    assert "unsigned" in by_key["unsigned"]
    assert "does not match" in by_key["forged"]
    assert "signed for tenant globex" in by_key["cross"]
    assert "belongs to another tenant" in by_key["acme-owned"]
