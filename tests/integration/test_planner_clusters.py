"""The planner and the jobs-topic ingest on two PostgreSQL clusters (two databases of the test
server, ``cluster_urls``): each job is written to, planned in and fenced in its shard's cluster
only; the forecast stays in the home cluster; a cluster that fails stops neither the other's
planning nor loses a record of the ingest."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import text

from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.records import JOB_DEFINITIONS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import StoreError
from duetime.jobdef import parse_job
from duetime.shard_map import ShardMap
from duetime.sharding import shard_for
from duetime.store import Store, flow
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply_clusters
from duetime_planner.clusters import ClusterPlanners
from duetime_planner.config import PlannerConfig
from duetime_planner.ingest import IngestStats, JobIngest
from duetime_planner.ports import ShardOwner
from tests.fixtures.clusters import job_ids_on

pytestmark = pytest.mark.integration


@dataclass
class _Two:
    settings: Settings
    clusters: ClusterStores
    producer: Producer
    catalog: TopicCatalog


@pytest.fixture
def two(cluster_urls: tuple[str, str], stack: Any) -> Iterator[_Two]:
    shard_map = ShardMap.even(cluster_urls)
    settings = Settings(
        database_url=shard_map.home_url,
        shard_map=shard_map,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"c{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    clusters = ClusterStores(shard_map, pool_size=2)
    yield _Two(
        settings, clusters, Producer(producer_config(settings)), TopicCatalog(settings.topic_prefix)
    )
    clusters.close()


def _job(job_id: str, **extra: Any) -> Any:
    return parse_job(
        {
            "id": job_id,
            "schedule": {"interval": "PT1S"},
            "target": {"http": {"url": "https://example.com/hook"}},
            **extra,
        }
    )


def _rows(store: Store, sql: str) -> list[Any]:
    with store.engine.begin() as conn:
        return list(conn.execute(text(sql)).all())


def _planners(
    two: _Two,
    config: PlannerConfig,
    clock: Any = None,
    owner: ShardOwner | None = None,
    member: str = "planner",
) -> ClusterPlanners:
    extra = {} if clock is None else {"monotonic": clock}
    return ClusterPlanners.build(
        two.clusters.shard_map,
        two.clusters.stores,
        two.producer,
        two.catalog,
        config,
        ownership=owner,
        member=member,
        **extra,
    )


def _today() -> date:
    return datetime.now(UTC).date()


def _read_only(store: Store, on: bool) -> None:
    """Every new session of ``store``'s database read-only (``on``) or not: its writes fail, for
    a reason that has nothing to do with the data (a cluster that cannot take writes)."""
    database = store.engine.url.database
    with store.engine.begin() as conn:
        conn.execute(text("SET transaction_read_only = off"))
        action = (
            "SET default_transaction_read_only = on"
            if on
            else "RESET default_transaction_read_only"
        )
        conn.execute(text(f'ALTER DATABASE "{database}" {action}'))
    store.engine.dispose()


def test_each_cluster_plans_and_publishes_only_its_own_jobs(two: _Two) -> None:
    shard_map = two.clusters.shard_map
    first = job_ids_on(shard_map, 0, 6, "a")
    second = job_ids_on(shard_map, 1, 6, "b")
    jobs_apply_clusters(two.clusters, [_job(j) for j in first + second])
    planners = _planners(two, PlannerConfig(lookahead=timedelta(seconds=3)))
    done = planners.run_once(_today())
    assert done.failed == ()
    assert done.stats[0].jobs_planned == 6 and done.stats[1].jobs_planned == 6
    assert done.total.runs_published == done.total.runs_created >= 24
    for index, mine, theirs in ((0, first, second), (1, second, first)):
        store = two.clusters.stores[index]
        runs = _rows(store, "SELECT job_id, published_at FROM runs")
        assert {r.job_id for r in runs} == set(mine)
        assert not {r.job_id for r in runs} & set(theirs)
        assert all(shard_map.cluster_of_job(r.job_id) == index for r in runs)
        assert all(r.published_at is not None for r in runs)


def test_the_forecast_of_a_rate_limited_target_stays_in_the_home_cluster(two: _Two) -> None:
    home, other = two.clusters.stores
    with home.tx() as tx:
        flow.set_limits(tx.conn, "limited.example.com", rate=2.0)
        now = tx.db_now()
    due = (now + timedelta(minutes=2)).replace(microsecond=0)
    ids = job_ids_on(two.clusters.shard_map, 1, 40, "win")
    jobs = [
        _job(
            j,
            schedule={"at": due.isoformat()},
            window_seconds=30,
            target_service="limited.example.com",
        )
        for j in ids
    ]
    jobs_apply_clusters(two.clusters, jobs)
    planners = _planners(two, PlannerConfig(lookahead=timedelta(minutes=5), batch_size=10))
    assert planners.run_once(_today()).stats[1].runs_created == 40
    due_ats = [r.due_at for r in _rows(other, "SELECT due_at FROM runs")]
    per_second = Counter(int(d.timestamp()) for d in due_ats)
    assert len(due_ats) == 40 and max(per_second.values()) <= 2  # placed by the home forecast
    (planned,) = _rows(home, "SELECT sum(runs) AS n FROM target_forecast")
    assert planned.n == 40
    assert _rows(other, "SELECT * FROM target_forecast") == []


def test_a_cluster_that_fails_does_not_stop_the_other(two: _Two) -> None:
    shard_map = two.clusters.shard_map
    first, second = job_ids_on(shard_map, 0, 3, "up"), job_ids_on(shard_map, 1, 3, "down")
    jobs_apply_clusters(two.clusters, [_job(j) for j in first + second])
    home, other = two.clusters.stores
    clock = [100.0]
    planners = _planners(two, PlannerConfig(lookahead=timedelta(seconds=3)), lambda: clock[0])
    _read_only(other, True)
    try:
        done = planners.run_once(_today())
    finally:
        _read_only(other, False)
    assert done.failed == (1,) and set(done.stats) == {0}
    assert done.stats[0].jobs_planned == 3
    assert {r.job_id for r in _rows(home, "SELECT job_id FROM runs")} == set(first)
    assert _rows(other, "SELECT 1 FROM runs") == []
    # Back after its pause: the cluster is planned from where it was.
    clock[0] += 2.5
    back = planners.run_once(_today())
    assert back.failed == () and back.stats[1].jobs_planned == 3
    assert {r.job_id for r in _rows(other, "SELECT job_id FROM runs")} == set(second)


@dataclass
class _Owner:
    tokens: dict[int, int]

    def current(self, now: float) -> Mapping[int, int]:
        return self.tokens


def test_etcd_mode_two_planners_fence_each_shard_in_its_own_cluster(two: _Two) -> None:
    """Two planners each own shards on both clusters: each plans only its own, claims them in
    the shard's cluster, and a planner whose shards moved is refused there."""
    shard_map = two.clusters.shard_map
    a0, a1 = job_ids_on(shard_map, 0, 1, "a")[0], job_ids_on(shard_map, 1, 1, "a")[0]
    b0 = next(j for j in job_ids_on(shard_map, 0, 20, "b") if shard_for(j) != shard_for(a0))
    b1 = next(j for j in job_ids_on(shard_map, 1, 20, "b") if shard_for(j) != shard_for(a1))
    jobs_apply_clusters(two.clusters, [_job(j) for j in (a0, a1, b0, b1)])
    owner_a = _Owner({shard_for(a0): 5, shard_for(a1): 5})
    owner_b = _Owner({shard_for(b0): 6, shard_for(b1): 6})
    config = PlannerConfig(lookahead=timedelta(seconds=3))
    planner_a = _planners(two, config, owner=owner_a, member="a")
    planner_b = _planners(two, config, owner=owner_b, member="b")
    done_a, done_b = planner_a.run_once(_today()), planner_b.run_once(_today())
    assert done_a.total.jobs_planned == 2 and done_b.total.jobs_planned == 2
    for index, (mine_a, mine_b) in enumerate(((a0, b0), (a1, b1))):
        store = two.clusters.stores[index]
        owners = {
            r.shard_id: (r.owner, r.token) for r in _rows(store, "SELECT * FROM shard_owners")
        }
        assert owners == {shard_for(mine_a): ("a", 5), shard_for(mine_b): ("b", 6)}
        assert {r.job_id for r in _rows(store, "SELECT job_id FROM runs")} == {mine_a, mine_b}
    # b takes a's shard of cluster 1 over (a newer token); a, not yet told, is refused there
    # and only there.
    owner_b.tokens[shard_for(a1)] = 9
    assert planner_b.run_once(_today()).failed == ()
    stale = planner_a.run_once(_today())
    assert stale.stats[1].shards_refused == 1 and stale.stats[0].shards_refused == 0
    home, other = two.clusters.stores
    (row,) = _rows(other, f"SELECT * FROM shard_owners WHERE shard_id = {shard_for(a1)}")
    assert (row.owner, row.token, row.rejected) == ("b", 9, 1)
    assert _rows(home, f"SELECT 1 FROM shard_owners WHERE shard_id = {shard_for(a1)}") == []


def _produce(two: _Two, jobs: list[Any]) -> None:
    for job in jobs:
        two.producer.produce(
            two.catalog.jobs,
            JOB_DEFINITIONS.encode(job),
            job.job_id.encode(),
            headers=JOB_DEFINITIONS.headers(),
        )
    two.producer.flush(10)


def test_the_ingest_writes_each_job_to_its_cluster_and_a_failed_cluster_loses_nothing(
    two: _Two,
) -> None:
    shard_map = two.clusters.shard_map
    first, second = job_ids_on(shard_map, 0, 4, "in"), job_ids_on(shard_map, 1, 4, "in")
    _produce(two, [_job(j, version=1) for j in first + second])
    consumer = Consumer(consumer_config(two.settings, f"{two.settings.topic_prefix}planner-ingest"))
    ingest = JobIngest(two.clusters, consumer, two.producer, two.catalog)
    home, other = two.clusters.stores
    _read_only(other, True)
    failures = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    try:
        while failures < 2 and datetime.now(UTC) < deadline:
            try:
                ingest.run_once(timeout=0.5)
            except StoreError:
                failures += 1  # the batch is read again, not skipped
    finally:
        _read_only(other, False)
    assert failures == 2
    # The home cluster's part was committed, the other's not: nothing of it is lost.
    assert {r.job_id for r in _rows(home, "SELECT job_id FROM jobs")} == set(first)
    assert _rows(other, "SELECT job_id FROM jobs") == []
    accepted = rejected = 0
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while accepted + rejected < 8 and datetime.now(UTC) < deadline:
        stats = ingest.run_once(timeout=0.5)
        accepted, rejected = accepted + stats.accepted, rejected + stats.rejected
    assert (accepted, rejected) == (8, 0)
    assert ingest.run_once(timeout=0.5) == IngestStats()  # and the offsets moved past all
    consumer.close()
    assert {r.job_id for r in _rows(home, "SELECT job_id FROM jobs")} == set(first)
    assert {r.job_id for r in _rows(other, "SELECT job_id FROM jobs")} == set(second)
