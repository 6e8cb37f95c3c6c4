"""The planner on the real stack: due scan -> runs -> outbox publish; jobs-topic ingest."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import text

from duetime.bus.kafka import consumer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS, RUN_EVENTS
from duetime.bus.run_headers import epoch_ms, read_routing
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.schedule import due_at
from duetime.shard_map import ShardMap
from duetime.store import Store, flow, tenants
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.ingest import IngestStats, JobIngest
from duetime_planner.planner import Planner, PlanStats

pytestmark = pytest.mark.integration


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


def _one_cluster(settings: Settings) -> ClusterStores:
    return ClusterStores(ShardMap.single(settings.require_database()), pool_size=2)


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
    # Routing headers on every record: a router reads them instead of decoding the value.
    for message, event in zip(messages, decoded, strict=True):
        routing = read_routing(message.headers())
        assert routing is not None
        assert (routing.run_id, routing.attempt) == (event.run_id, 1)
        assert routing.due_at_ms == epoch_ms(event.due_at)
        assert routing.target_kind == "http"
        assert routing.sent_at_ms is not None
        assert routing.sent_at_ms <= epoch_ms(by_run[event.run_id].published_at)


def test_batches_insert_advance_and_publish_many_jobs(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    kafka_target = {"kafka": {"topic": "user.events", "key": "k", "value": "{}"}}
    jobs = [_job(f"many-{i:02d}", schedule={"at": "2020-01-01T00:00:00Z"}) for i in range(20)]
    jobs += [
        _job(f"emit-{i:02d}", schedule={"at": "2020-01-01T00:00:00Z"}, target=kafka_target)
        for i in range(5)
    ]
    with store.tx() as tx:
        jobs_apply(tx, jobs)
    config = PlannerConfig(lookahead=timedelta(seconds=3), batch_size=7)
    planner = Planner(store, producer, catalog, config)
    planner.ensure_partitions(datetime.now(UTC).date())
    stats = planner.run_once()
    assert (stats.jobs_planned, stats.runs_created, stats.runs_published) == (25, 25, 25)
    with store.engine.begin() as conn:
        runs = conn.execute(text("SELECT run_id, publish_count FROM runs")).all()
        advanced = conn.execute(
            text(
                "SELECT count(*) AS n FROM jobs WHERE next_run_at IS NULL "
                "AND last_scheduled_for = TIMESTAMPTZ '2020-01-01T00:00:00Z'"
            )
        ).one()
    assert len(runs) == 25 and all(r.publish_count == 1 for r in runs)
    assert advanced.n == 25  # one-off jobs: nothing more to plan
    messages = _consume_all(settings, list(catalog.due_topics), 25)
    kinds = Counter(read_routing(m.headers()).target_kind for m in messages)  # type: ignore[union-attr]
    assert kinds == {"http": 20, "kafka": 5}
    assert planner.run_once().runs_published == 0


def _insert_run(
    conn: Any,
    job_id: str,
    *,
    service: str,
    due_s: float,
    published_s: float | None,
    started_s: float | None = None,
    state: str = "scheduled",
    publish_count: int = 1,
) -> uuid.UUID:
    """A run whose instants are offsets in seconds from the database clock."""
    run_id = uuid.uuid4()
    conn.execute(
        text(
            "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at, "
            "state, attempt, max_attempts, lease_token, lease_expires_at, published_at, "
            "started_at, publish_count) "
            "SELECT :run_id, :job_id, 'team', :service, now() + make_interval(secs => :due), "
            "now() + make_interval(secs => :due), :state, "
            "CASE WHEN :state = 'scheduled' THEN 0 ELSE 1 END, 3, "
            "CASE WHEN :state = 'running' THEN gen_random_uuid() END, "
            "CASE WHEN :state = 'running' THEN now() + interval '1 minute' END, "
            "now() + make_interval(secs => CAST(:published AS double precision)), "
            "now() + make_interval(secs => CAST(:started AS double precision)), :count"
        ),
        {
            "run_id": run_id,
            "job_id": job_id,
            "service": service,
            "due": due_s,
            "state": state,
            "published": published_s,
            "started": started_s,
            "count": publish_count,
        },
    )
    return run_id


def _republished(store: Store) -> set[uuid.UUID]:
    with store.engine.begin() as conn:
        rows = conn.execute(
            text("SELECT run_id FROM runs WHERE state = 'scheduled' AND published_at IS NULL")
        ).all()
    return {r.run_id for r in rows}


def test_the_sweeper_does_not_republish_runs_waiting_in_a_healthy_backlog(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    planner = Planner(store, producer, TopicCatalog(settings.topic_prefix), PlannerConfig())
    planner.ensure_partitions(datetime.now(UTC).date())
    with store.engine.begin() as conn:
        # 100 runs due a minute ago wait behind a backlog that is being worked: claims of runs
        # due at the same instant keep coming (the last one a second ago).
        for i in range(100):
            _insert_run(conn, f"wait-{i}", service="busy", due_s=-60, published_s=-90)
        for i in range(5):
            _insert_run(
                conn,
                f"work-{i}",
                service="busy",
                due_s=-60,
                published_s=-90,
                started_s=-1 - i,
                state="running",
            )
        # A backlog whose consumers drain at different speeds: the group's head started 50 s
        # late and is 25 s past a run still waiting, more than the 10 s margin but less than
        # the margin plus the head's own lateness.
        _insert_run(conn, "skewed-wait", service="skewed", due_s=-85, published_s=-90)
        _insert_run(
            conn,
            "skewed-head",
            service="skewed",
            due_s=-60,
            published_s=-90,
            started_s=-10,
            state="running",
        )
        # Published recently by a previous sweep (publish_count 2: a 60 s grace), then the
        # group moved on: not yet due for another publication.
        _insert_run(conn, "again", service="moving", due_s=-300, published_s=-40, publish_count=2)
        _insert_run(
            conn,
            "ahead",
            service="moving",
            due_s=-20,
            published_s=-50,
            started_s=-19,
            state="succeeded",
        )
    assert planner.sweep().runs_swept == 0
    assert _republished(store) == set()


def test_the_sweeper_republishes_runs_that_were_lost(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    planner = Planner(store, producer, catalog, PlannerConfig(sweep_limit=2))
    planner.ensure_partitions(datetime.now(UTC).date())
    with store.engine.begin() as conn:
        # The pipeline moved past it: a run of its group due 80 s later was claimed.
        passed = _insert_run(conn, "passed", service="moving", due_s=-120, published_s=-150)
        _insert_run(
            conn,
            "later",
            service="moving",
            due_s=-40,
            published_s=-60,
            started_s=-39,
            state="succeeded",
        )
        # Its group stalled: claimed nothing for far longer than the grace.
        stalled = _insert_run(conn, "stalled", service="quiet", due_s=-100, published_s=-130)
        _insert_run(
            conn,
            "long-ago",
            service="quiet",
            due_s=-600,
            published_s=-620,
            started_s=-600,
            state="succeeded",
        )
        # Its group never claimed anything (all its records lost): stalled too.
        orphan = _insert_run(conn, "orphan", service="lost", due_s=-90, published_s=-95)
    # At most sweep_limit per round, oldest first; the next round takes the rest.
    assert planner.sweep().runs_swept == 2
    assert _republished(store) == {passed, stalled}
    assert planner.sweep().runs_swept == 1
    assert _republished(store) == {passed, stalled, orphan}
    # The outbox publishes them again and counts the publication.
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (job_id, shard_id, schedule_kind, schedule_expr, target, "
                "target_service) SELECT j, 0, 'at', '2020-01-01T00:00:00Z', "
                "CAST(:target AS jsonb), 'x' FROM unnest(CAST(:ids AS text[])) AS j"
            ),
            {
                "ids": ["passed", "stalled", "orphan"],
                "target": '{"http": {"url": "https://example.com/", "method": "POST", '
                '"headers": [], "body": null, "timeout_ms": 1000}}',
            },
        )
    assert planner.publish_batch()[0].runs_published == 3
    with store.engine.begin() as conn:
        counts = conn.execute(
            text("SELECT publish_count FROM runs WHERE run_id = ANY(:ids)"),
            {"ids": [passed, stalled, orphan]},
        ).all()
    assert sorted(c.publish_count for c in counts) == [2, 2, 2]
    # Published again just now: the doubled grace keeps them from being swept at once.
    assert planner.sweep().runs_swept == 0


def test_the_sweepers_margin_grows_with_the_groups_lateness(
    env: tuple[Settings, Store, Producer],
) -> None:
    settings, store, producer = env
    planner = Planner(store, producer, TopicCatalog(settings.topic_prefix), PlannerConfig())
    planner.ensure_partitions(datetime.now(UTC).date())
    with store.engine.begin() as conn:
        # The group's head started 50 s after it was due: a margin of 10 + 50 s.
        _insert_run(
            conn,
            "head",
            service="late",
            due_s=-60,
            published_s=-90,
            started_s=-10,
            state="running",
        )
        waiting = _insert_run(conn, "waiting", service="late", due_s=-100, published_s=-110)
        behind = _insert_run(conn, "behind", service="late", due_s=-200, published_s=-210)
    swept = planner.sweep()
    assert swept.runs_swept == 1
    assert _republished(store) == {behind}
    assert waiting not in _republished(store)


def test_the_sweeper_and_the_publish_mark_skip_rows_another_transaction_writes(
    env: tuple[Settings, Store, Producer],
) -> None:
    # Both used to wait for such a row, and the writer of a batch of rows (the dispatcher
    # recording emitted runs) waiting in turn on a row they had locked was a deadlock.
    settings, store, producer = env
    planner = Planner(store, producer, TopicCatalog(settings.topic_prefix), PlannerConfig())
    planner.ensure_partitions(datetime.now(UTC).date())
    with store.engine.begin() as conn:
        busy = _insert_run(conn, "busy", service="lost", due_s=-90, published_s=-95)
        free = _insert_run(conn, "free", service="lost", due_s=-80, published_s=-95)
        fresh = _insert_run(conn, "fresh", service="new", due_s=60, published_s=None)
        fresh_busy = _insert_run(conn, "fresh-busy", service="new", due_s=60, published_s=None)
        keys = {
            r.run_id: r.scheduled_for
            for r in conn.execute(
                text("SELECT run_id, scheduled_for FROM runs WHERE run_id = ANY(:ids)"),
                {"ids": [fresh, fresh_busy]},
            )
        }
    with store.engine.connect() as other:
        other.execute(
            text("SELECT 1 FROM runs WHERE run_id = ANY(:ids) FOR UPDATE"),
            {"ids": [busy, fresh_busy]},
        )
        with store.tx() as tx:
            tx.conn.execute(text("SET LOCAL lock_timeout = '5s'"))  # a wait would fail the test
            swept = tx.runs_sweep_lost(
                grace=timedelta(seconds=30),
                max_grace=timedelta(minutes=10),
                margin=timedelta(seconds=10),
                limit=10,
                scan_limit=100,
            )
            marked = tx.runs_mark_published_many(list(keys.items()))
        other.rollback()
    assert [run_id for run_id, _reason in swept] == [free]
    assert marked == 1
    assert _republished(store) == {free, fresh_busy}
    # Once the other transaction ended, the next rounds take them.
    assert planner.sweep().runs_swept == 1
    assert _republished(store) == {free, busy, fresh_busy}


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
    ingest = JobIngest(_one_cluster(settings), consumer, producer, catalog)
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


def test_ingest_rejects_only_the_records_over_a_tenant_quota(
    env: tuple[Settings, Store, Producer],
) -> None:
    """In batch order: the first records that fit are stored, the ones that find the tenant full
    go to jobs.rejected with the reason, the rest of the batch (other tenants, updates) is
    stored, and the consumer moves on."""
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    with store.tx() as tx:
        tenants.set_tenant(tx.conn, "acme", max_jobs=2)
        jobs_apply(tx, [_job("a0", tenant="acme")])
    records = [
        _job("a1", tenant="acme", version=1),  # fits: acme has 1 of 2
        _job("g1", tenant="globex", version=1),  # no quota
        _job("a2", tenant="acme", version=1),  # acme is full
        _job("a0", tenant="acme", version=2, paused=True),  # an update of a full tenant's job
        _job("a3", tenant="acme", version=1),  # still full
    ]
    for job in records:  # one partition: the batch order is the produce order
        producer.produce(
            catalog.jobs,
            JOB_DEFINITIONS.encode(job),
            job.job_id.encode(),
            partition=0,
            headers=JOB_DEFINITIONS.headers(),
        )
    producer.flush(10)
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}ingest"))
    ingest = JobIngest(_one_cluster(settings), consumer, producer, catalog)
    totals = Counter[str]()
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while totals["accepted"] + totals["rejected"] < 5 and datetime.now(UTC) < deadline:
        stats = ingest.run_once(timeout=0.5)
        totals.update(accepted=stats.accepted, rejected=stats.rejected)
    assert ingest.run_once(timeout=0.5) == IngestStats()  # offsets moved past all five
    consumer.close()
    assert (totals["accepted"], totals["rejected"]) == (3, 2)
    with store.engine.begin() as conn:
        rows = conn.execute(text("SELECT job_id, tenant, paused, version FROM jobs")).all()
    assert sorted(tuple(r) for r in rows) == [
        ("a0", "acme", True, 2),
        ("a1", "acme", False, 1),
        ("g1", "globex", False, 1),
    ]
    rejected = sorted(
        (
            JOB_REJECTIONS.decode(m.value(), m.headers())
            for m in _consume_all(settings, [catalog.jobs_rejected], 2)
        ),
        key=lambda r: r.source_offset,  # keyed by job_id: on partitions of their own
    )
    assert [(r.key, r.field, r.reason) for r in rejected] == [
        (b"a2", "tenant", "tenant acme may have at most 2 jobs and has 2"),
        (b"a3", "tenant", "tenant acme may have at most 2 jobs and has 2"),
    ]
    assert [r.value for r in rejected] == [JOB_DEFINITIONS.encode(records[i]) for i in (2, 4)]
    assert [(r.source_partition, r.source_offset) for r in rejected] == [(0, 2), (0, 4)]


def test_runs_the_broker_did_not_acknowledge_stay_in_the_outbox(
    env: tuple[Settings, Store, Producer],
) -> None:
    """The planning round publishes its new runs at once, but marks only what was acknowledged:
    with the broker unreachable nothing is marked, and the outbox publishes them later."""
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    with store.tx() as tx:
        jobs_apply(
            tx, [_job(f"lost-{i}", schedule={"at": "2020-01-01T00:00:00Z"}) for i in range(3)]
        )
    unreachable = Producer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 500})
    config = PlannerConfig(lookahead=timedelta(seconds=3), publish_timeout=timedelta(seconds=3))
    cut_off = Planner(store, unreachable, catalog, config)
    cut_off.ensure_partitions(datetime.now(UTC).date())
    stats = cut_off.run_once()
    assert (stats.runs_created, stats.runs_published) == (3, 0)
    assert stats.publish_failures >= 3
    with store.engine.begin() as conn:
        marked = conn.execute(text("SELECT count(*) FROM runs WHERE published_at IS NOT NULL"))
        assert marked.scalar_one() == 0
    healed = Planner(store, producer, catalog, config).run_once()
    assert (healed.runs_created, healed.runs_published) == (0, 3)
    messages = _consume_all(settings, list(catalog.due_topics), 3)
    assert sorted(RUN_EVENTS.decode(m.value()).job_id for m in messages) == [
        "lost-0",
        "lost-1",
        "lost-2",
    ]


def test_runs_of_a_planner_that_died_before_the_broker_answered_are_published_by_another(
    env: tuple[Settings, Store, Producer],
) -> None:
    """A round inserts its runs provisionally marked published, with one publication row, and
    settles it once the broker answered. Its planner killed in between leaves the row: the next
    planner's outbox recovers it once older than the publish timeout allows, and publishes."""
    settings, store, producer = env
    catalog = TopicCatalog(settings.topic_prefix)
    with store.tx() as tx:
        jobs_apply(
            tx, [_job(f"died-{i}", schedule={"at": "2020-01-01T00:00:00Z"}) for i in range(3)]
        )
    config = PlannerConfig(lookahead=timedelta(seconds=3), publish_timeout=timedelta(seconds=3))
    died = Planner(store, producer, catalog, config, member="died")
    died.ensure_partitions(datetime.now(UTC).date())

    def killed(*_args: Any) -> PlanStats:
        raise SystemExit("killed between the commit and the broker's answer")

    died._publish_planned = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        died.run_once()
    with store.engine.begin() as conn:
        unsettled = conn.execute(text("SELECT cardinality(run_ids) FROM run_publications"))
        assert unsettled.scalars().all() == [3]
        marked = conn.execute(text("SELECT count(*) FROM runs WHERE published_at IS NOT NULL"))
        assert marked.scalar_one() == 3  # provisionally
    other = Planner(store, producer, catalog, config, member="other")
    assert other.run_once().runs_published == 0  # in flight for all it knows: left alone
    with store.engine.begin() as conn:  # ... until older than the publish timeout allows
        conn.execute(text("UPDATE run_publications SET created_at = now() - interval '1 minute'"))
    assert other.run_once().runs_published == 3
    messages = _consume_all(settings, list(catalog.due_topics), 3)
    assert sorted(RUN_EVENTS.decode(m.value()).job_id for m in messages) == [
        "died-0",
        "died-1",
        "died-2",
    ]
    with store.engine.begin() as conn:
        left = conn.execute(text("SELECT count(*) FROM run_publications")).scalar_one()
        marked = conn.execute(text("SELECT count(*) FROM runs WHERE published_at IS NOT NULL"))
        assert (left, marked.scalar_one()) == (0, 3)


def test_windowed_runs_are_spread_under_their_targets_rate(
    env: tuple[Settings, Store, Producer],
) -> None:
    """500 jobs due at one instant with a 60 s window, on a target limited to 10 runs/s, planned
    in batches of 100: every second of the window gets at most 10 of them, where their hash
    offsets alone put more than 10 into some seconds."""
    settings, store, producer = env
    with store.tx() as tx:
        flow.set_limits(tx.conn, "limited.example.com", rate=10.0)
        now = tx.db_now()
    due = (now + timedelta(minutes=2)).replace(microsecond=0)
    jobs = [
        _job(
            f"win-{i:03d}",
            schedule={"at": due.isoformat()},
            window_seconds=60,
            target_service="limited.example.com",
        )
        for i in range(500)
    ]
    jobs += [_job("free-0", schedule={"at": due.isoformat()}, window_seconds=60)]
    with store.tx() as tx:
        jobs_apply(tx, jobs)
    config = PlannerConfig(lookahead=timedelta(minutes=5), batch_size=100)
    planner = Planner(store, producer, TopicCatalog(settings.topic_prefix), config)
    planner.ensure_partitions(datetime.now(UTC).date())
    assert planner.run_once().runs_created == 501
    with store.engine.begin() as conn:
        rows = conn.execute(
            text("SELECT due_at FROM runs WHERE target_service = 'limited.example.com'")
        ).all()
        forecast = conn.execute(
            text("SELECT sum(runs) FROM target_forecast WHERE target_service = :t"),
            {"t": "limited.example.com"},
        ).scalar_one()
    per_second = Counter(int(r.due_at.timestamp()) for r in rows)
    assert len(rows) == 500 and max(per_second.values()) <= 10
    by_hash = Counter(
        int(due_at(f"win-{i:03d}", due, timedelta(seconds=60), None).timestamp())
        for i in range(500)
    )
    assert max(by_hash.values()) > 10
    assert all(due <= r.due_at < due + timedelta(seconds=60) for r in rows)
    assert forecast == 500  # the forecast counts what was planned, for the next batches
