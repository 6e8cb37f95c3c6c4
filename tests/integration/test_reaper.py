"""The reaper on the real stack: expired leases retried with backoff, then dead + dead topic."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import text

from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.records import RUN_DEAD
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.model import run_id_for
from duetime.store import NewRun, Store
from duetime.store.jobs import jobs_apply
from duetime.store.leases import LeaseCheck, runs_expire_batch, runs_expired_among
from duetime_reaper.expiry import expiry_for
from duetime_reaper.reaper import Reaper

pytestmark = pytest.mark.integration


def test_expired_lease_is_retried_then_dead_and_published(database_url: str, stack: Any) -> None:
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"r{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    catalog = TopicCatalog(settings.topic_prefix)
    store = Store(database_url, pool_size=2)
    producer = Producer(producer_config(settings))
    job = parse_job(
        {
            "id": "reaped",
            "schedule": {"interval": "PT1H"},
            "target": {"http": {"url": "https://example.com"}},
            "retry": {"max_attempts": 2, "initial_interval_seconds": 0.1},
        }
    )
    scheduled_for = datetime.now(UTC).replace(microsecond=0)
    run_id = run_id_for("reaped", scheduled_for)
    with store.tx() as tx:
        jobs_apply(tx, [job])
        tx.runs_ensure_partition(scheduled_for.date())
        tx.runs_insert(
            [NewRun(run_id, "reaped", "default", "example.com", scheduled_for, scheduled_for, 2)]
        )
    reaper = Reaper(store, producer, catalog)

    # Attempt 1: a worker claims with a tiny lease and then goes silent.
    claim = store.runs_claim(run_id, scheduled_for, 1, "w-gone", timedelta(milliseconds=100))
    assert claim is not None and claim.attempt == 1
    time.sleep(0.3)
    stats = reaper.run_once()
    assert (stats.expired, stats.retried, stats.dead) == (1, 1, 0)
    with store.engine.begin() as conn:
        row = conn.execute(text("SELECT * FROM runs WHERE run_id = :r"), {"r": run_id}).one()
    assert row.state == "scheduled" and row.attempt == 1 and row.published_at is None
    assert row.due_at > row.updated_at - timedelta(seconds=1)
    # The zombie's late completion is fenced.
    assert not store.runs_complete(
        run_id=run_id,
        scheduled_for=scheduled_for,
        attempt=1,
        worker="w-gone",
        lease_token=claim.lease_token,
        state="succeeded",
        outcome="succeeded",
    )

    # A late copy of attempt 1's message claims nothing; attempt 2's claim carries a higher
    # fencing token, so a target can tell the zombie of attempt 1 from its successor.
    assert store.runs_claim(run_id, scheduled_for, 1, "w-late", timedelta(seconds=30)) is None
    # Attempt 2, the last one, also expires: dead, then on the dead topic.
    claim2 = store.runs_claim(run_id, scheduled_for, 2, "w-2", timedelta(milliseconds=100))
    assert claim2 is not None and claim2.lease_token != claim.lease_token
    assert claim2.fencing_token > claim.fencing_token
    time.sleep(0.3)
    stats = reaper.run_once()
    assert (stats.expired, stats.dead, stats.dead_published) == (1, 1, 1)
    with store.engine.begin() as conn:
        row = conn.execute(text("SELECT * FROM runs WHERE run_id = :r"), {"r": run_id}).one()
        attempts = conn.execute(
            text("SELECT attempt, outcome FROM run_attempts WHERE run_id=:r ORDER BY attempt"),
            {"r": run_id},
        ).all()
        fenced = conn.execute(text("SELECT count(*) FROM run_fenced_completions")).scalar()
    assert row.state == "dead" and row.dead_published_at is not None
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, "lease_expired"),
        (2, "lease_expired"),
    ]
    assert fenced == 1
    assert reaper.run_once().dead_published == 0  # published once only

    consumer = Consumer(consumer_config(settings, f"t-{uuid.uuid4().hex}"))
    consumer.subscribe([catalog.dead])
    deadline = time.monotonic() + 20
    record = None
    while record is None and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            record = RUN_DEAD.decode(msg.value(), msg.headers())
    consumer.close()
    store.close()
    assert record is not None and record.run_id == run_id and record.attempts == 2


def test_the_database_judges_the_leases_the_stream_asks_about(database_url: str) -> None:
    store = Store(database_url, pool_size=3)
    job = parse_job(
        {
            "id": "judged",
            "schedule": {"interval": "PT1H"},
            "target": {"http": {"url": "https://example.com"}},
            "retry": {"max_attempts": 2, "initial_interval_seconds": 0.1},
        }
    )
    base = datetime.now(UTC).replace(microsecond=0)
    runs = {
        name: (run_id_for("judged", base + timedelta(hours=n)), base + timedelta(hours=n))
        for n, name in enumerate(["expired", "held", "locked", "ended", "moved_on"])
    }
    with store.tx() as tx:
        jobs_apply(tx, [job])
        for run_id, scheduled_for in runs.values():
            tx.runs_ensure_partition(scheduled_for.date())
            tx.runs_insert(
                [
                    NewRun(
                        run_id, "judged", "default", "example.com", scheduled_for, scheduled_for, 2
                    )
                ]
            )
    short, long = timedelta(milliseconds=100), timedelta(seconds=30)
    claims = {
        name: store.runs_claim(run_id, scheduled_for, 1, "w1", long if name == "held" else short)
        for name, (run_id, scheduled_for) in runs.items()
    }
    assert all(claims.values())
    ended_claim = claims["ended"]
    assert ended_claim is not None
    run_id, scheduled_for = runs["ended"]
    assert store.runs_complete(
        run_id=run_id,
        scheduled_for=scheduled_for,
        attempt=1,
        worker="w1",
        lease_token=ended_claim.lease_token,
        state="succeeded",
        outcome="succeeded",
    )
    time.sleep(0.3)  # the short leases run out by the database clock
    checks = [LeaseCheck(run_id, scheduled_for, 1) for run_id, scheduled_for in runs.values()]
    # "moved_on": the stream asks about attempt 2, the database has attempt 1 running.
    moved_id, moved_for = runs["moved_on"]
    checks[-1] = LeaseCheck(moved_id, moved_for, 2)

    with store.engine.connect() as other:  # a worker renewing "locked" at this very moment
        other.execute(
            text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": runs["locked"][0]}
        )
        with store.tx() as tx:
            verdicts = runs_expired_among(tx, checks)
            ended = runs_expire_batch(tx, [expiry_for(lease) for lease in verdicts.expired])
        other.rollback()

    assert [lease.run_id for lease in verdicts.expired] == [runs["expired"][0]]
    assert ended == {runs["expired"][0]}
    # Still held, or locked by someone else: looked at again later, with the lease it has now.
    assert set(verdicts.alive) == {(runs["held"][0], 1), (runs["locked"][0], 1)}
    assert verdicts.alive[(runs["held"][0], 1)] > datetime.now(UTC) + timedelta(seconds=20)
    with store.engine.begin() as conn:
        states = dict(
            conn.execute(
                text("SELECT run_id, state FROM runs WHERE run_id = ANY(:r)"),
                {"r": [run_id for run_id, _ in runs.values()]},
            ).all()
        )
        fenced = conn.execute(text("SELECT count(*) FROM run_fenced_completions")).scalar()
    assert states[runs["expired"][0]] == "scheduled"
    assert states[runs["locked"][0]] == "running"  # expired, but not this round's to end
    assert states[runs["ended"][0]] == "succeeded"
    assert fenced == 0  # the reaper's ends are never recorded as rejected completions
    store.close()
