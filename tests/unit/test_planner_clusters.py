"""The planner over several clusters (``duetime_planner.clusters``) on the in-memory twins: each
cluster's planner plans that cluster's shards only, fences them in that cluster, and a cluster
that fails does not stop the others."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from duetime.bus.topics import TopicCatalog
from duetime.errors import ConfigError, StoreError
from duetime.shard_map import ShardMap
from duetime.sharding import shard_for
from duetime_planner.clusters import ClusterPlanners
from duetime_planner.config import PlannerConfig
from duetime_planner.ports import ShardOwner
from tests.fakes.clock import ManualClock
from tests.fakes.planner_store import FakePlannerStore, FakePlannerTx, FakeProducer, due_job
from tests.fixtures.clusters import job_ids_on

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
# No refill: a round plans exactly the lookahead (the refill has its own test).
CONFIG = PlannerConfig(
    lookahead=timedelta(seconds=30),
    max_lookahead=timedelta(seconds=30),
    refill=timedelta(0),
    batch_size=50,
)
TWO = ShardMap.even(["postgresql://a/duetime", "postgresql://b/duetime"])  # 0-63, 64-127


def _job_id(cluster: int, prefix: str) -> str:
    return job_ids_on(TWO, cluster, 1, prefix)[0]


class _Cluster(FakePlannerStore):
    """A cluster that can be taken away: every transaction fails while ``down``."""

    down = False

    @contextmanager
    def tx(self) -> Iterator[FakePlannerTx]:
        if self.down:
            raise StoreError("cluster unreachable")
        with super().tx() as tx:
            yield tx


@dataclass
class _Owner:
    tokens: dict[int, int]

    def current(self, now: float) -> Mapping[int, int]:
        return self.tokens


def _planners(
    stores: list[_Cluster], clock: ManualClock, owner: ShardOwner | None = None
) -> tuple[ClusterPlanners, FakeProducer]:
    producer = FakeProducer()
    planners = ClusterPlanners.build(
        TWO,
        stores,
        producer,
        TopicCatalog("t."),
        CONFIG,
        monotonic=clock,
        ownership=owner,
        member="p1",
    )
    return planners, producer


def test_each_cluster_plans_its_own_shards_and_nothing_else() -> None:
    stores = [_Cluster(NOW), _Cluster(NOW)]
    first, second = _job_id(0, "job"), _job_id(1, "job")
    stores[0].add_job(due_job(first, next_run_at=NOW))
    stores[1].add_job(due_job(second, next_run_at=NOW))
    # A row of cluster 1's shard found in cluster 0 (a copy left behind) is not cluster 0's.
    stores[0].add_job(due_job(second, next_run_at=NOW))
    planners, producer = _planners(stores, ManualClock(0.0))
    done = planners.run_once(NOW.date())
    assert set(done.stats) == {0, 1} and done.failed == ()
    assert done.stats[0].jobs_planned == 1 and done.stats[1].jobs_planned == 1
    assert stores[0].runs_of(first) and not stores[0].runs_of(second)
    assert stores[1].runs_of(second) and not stores[1].runs_of(first)
    assert done.total.runs_published == len(producer.records) == 8  # 4 runs each, 30 s ahead
    # Only the home cluster's planner plans without a separate home; the other reads target
    # limits and the forecast in the home cluster.
    (_i0, home_planner), (_i1, other) = planners.planners
    assert home_planner.home is None and other.home is stores[0]
    assert set(home_planner.config.shards) == TWO.shards_of(0)
    assert set(other.config.shards) == TWO.shards_of(1)


def test_one_cluster_is_planned_exactly_as_a_single_planner() -> None:
    store = _Cluster(NOW)
    planners = ClusterPlanners.build(
        ShardMap.single("postgresql://a/duetime"),
        [store],
        FakeProducer(),
        TopicCatalog("t."),
        CONFIG,
    )
    ((index, planner),) = planners.planners
    assert index == 0 and planner.config is CONFIG and planner.home is None


def test_a_failing_cluster_waits_out_its_pause_while_the_other_plans_on() -> None:
    stores = [_Cluster(NOW), _Cluster(NOW)]
    first, second = _job_id(0, "up"), _job_id(1, "up")
    stores[0].add_job(due_job(first, next_run_at=NOW))
    stores[1].add_job(due_job(second, next_run_at=NOW))
    # Cluster 0 is also the home cluster (target limits, the forecast): cluster 1 plans on
    # without placing runs by the forecast.
    stores[0].down = True
    clock = ManualClock(100.0)
    planners, _ = _planners(stores, clock)
    done = planners.run_once(NOW.date())
    assert done.failed == (0,) and set(done.stats) == {1}
    assert stores[1].runs_of(second)
    assert planners.next_retry_in() == 2.0
    # Within the pause the failed cluster is not tried (neither failed nor planned again).
    stores[0].down = False
    clock.now = 101.0
    stores[1].clock = NOW + timedelta(seconds=40)
    again = planners.run_once(NOW.date())
    assert again.failed == () and set(again.stats) == {1} and again.stats[1].jobs_planned == 1
    assert not stores[0].runs_of(first)
    # Past it, the cluster is back: partitions first (they were never made), then its jobs.
    clock.now = 102.5
    back = planners.run_once(NOW.date())
    assert set(back.stats) == {0, 1} and back.stats[0].jobs_planned == 1
    assert stores[0].runs_of(first) and NOW.date() in stores[0].state.partitions
    assert planners.next_retry_in() is None


def test_etcd_mode_claims_each_shard_in_its_own_cluster() -> None:
    stores = [_Cluster(NOW), _Cluster(NOW)]
    first, second = _job_id(0, "own"), _job_id(1, "own")
    stores[0].add_job(due_job(first, next_run_at=NOW))
    stores[1].add_job(due_job(second, next_run_at=NOW))
    s0, s1 = shard_for(first), shard_for(second)
    planners, _ = _planners(stores, ManualClock(0.0), _Owner({s0: 7, s1: 9}))
    done = planners.run_once(NOW.date())
    assert done.stats[0].jobs_planned == 1 and done.stats[1].jobs_planned == 1
    row0, row1 = stores[0].fence_row(s0), stores[1].fence_row(s1)
    assert row0 is not None and row0.token == 7
    assert row1 is not None and row1.token == 9
    assert stores[0].fence_row(s1) is None and stores[1].fence_row(s0) is None


def test_each_planner_is_given_the_instant_of_its_own_turn() -> None:
    """A long round on the first cluster must not let the second plan on a lease view taken
    before it: the owner is asked at the instant each planner starts."""
    clock = ManualClock(10.0)
    asked: list[float] = []

    class _Asked:
        def current(self, now: float) -> Mapping[int, int]:
            asked.append(now)
            clock.now += 5.0  # every look at the lease takes a while
            return {}

    planners, _ = _planners([_Cluster(NOW), _Cluster(NOW)], clock, _Asked())
    planners.run_once(NOW.date())
    assert len(asked) == 2 and asked[1] > asked[0]


def test_stores_must_match_the_shard_map() -> None:
    with pytest.raises(ConfigError, match="1 stores for a shard map of 2 clusters"):
        _planners([_Cluster(NOW)], ManualClock(0.0))


def test_the_lookahead_is_sized_for_the_spikes_of_every_cluster() -> None:
    """400 jobs due in 100 s on each cluster, planned at 10 jobs/s by one process: alone, a
    cluster's 40 s of work fits in the base lookahead (30 s) plus the time left, so nothing is
    planned yet; both together (80 s) do not, so both clusters plan their spike now."""
    config = PlannerConfig(
        lookahead=timedelta(seconds=30),
        max_lookahead=timedelta(minutes=10),
        planning_rate=10.0,
        batch_size=1000,
    )
    spike = NOW + timedelta(seconds=100)
    clock = ManualClock(0.0)

    def spiked(shard_map: ShardMap) -> tuple[ClusterPlanners, list[_Cluster]]:
        stores = [_Cluster(NOW) for _ in range(shard_map.size)]
        for cluster, store in enumerate(stores):
            for job_id in job_ids_on(shard_map, cluster, 400, "spike"):
                store.add_job(due_job(job_id, next_run_at=spike))
        planners = ClusterPlanners.build(
            shard_map, stores, FakeProducer(), TopicCatalog("t."), config, monotonic=clock
        )
        return planners, stores

    alone, (only,) = spiked(ShardMap.single("postgresql://a/duetime"))
    both, stores = spiked(TWO)
    for _ in range(2):  # the first cluster probed before the second's counts were known
        alone.run_once(NOW.date())
        both.run_once(NOW.date())
        clock.now += config.probe_interval.total_seconds()
    assert not any(only.runs_of(j) for j in only.state.jobs)
    assert all(store.runs_of(j) for store in stores for j in store.state.jobs)
