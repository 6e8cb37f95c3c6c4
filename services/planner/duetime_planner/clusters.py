"""The planner over several PostgreSQL clusters: one ``Planner`` per cluster, run one after another.

A cluster's planner plans the shards the shard map places there (intersected with the configured
ones; in etcd mode, further with what the lease holds: ``Planner`` keeps only the owned shards
of its configuration), with that cluster's store, so every planning transaction, fence claim,
cold-tier load, outbox read and sweep touches one cluster only. The producer and the shard
ownership are shared: the lease is one per process, and each shard's fence row lives in the
shard's cluster.

A cluster that fails (PostgreSQL away) does not stop the others: its round is logged
(``planner.round_failed`` with ``cluster``), counted, and tried again after ``retry_interval``
while the other clusters go on planning. With one cluster this is the single ``Planner`` the
service always ran, with the same pause after a failure.

Each planner is handed the monotonic instant when its turn comes, not the one the round started
at: a long round on one cluster must not make another plan on a lease that lapsed meanwhile.

Spikes: one process plans its clusters one after another, so a spike due on every cluster at once
takes the time of all of them. Each planner therefore sizes its lookahead on the jobs due ahead
on every cluster (``DueAhead``: each cluster's latest probe, at most ``probe_interval`` old) and
on the process's one planning rate, not on its own cluster alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from functools import partial
from operator import itemgetter

from duetime.bus.topics import TopicCatalog
from duetime.errors import ConfigError, DuetimeError
from duetime.logs import event
from duetime.planning import PlanningRate
from duetime.shard_map import ShardMap

from .config import PlannerConfig
from .planner import DueCounts, Planner, PlanStats
from .ports import PlannerStore, RecordProducer, ShardOwner

__all__ = ["ClusterPlanners", "ClusterRound", "DueAhead"]

log = logging.getLogger("duetime.planner")


@dataclass(frozen=True)
class ClusterRound:
    """What one round did: each planned cluster's stats (by cluster index), and the clusters
    whose round failed. A cluster waiting out its retry pause is in neither."""

    stats: dict[int, PlanStats] = field(default_factory=dict)
    failed: tuple[int, ...] = ()

    @property
    def total(self) -> PlanStats:
        return sum(self.stats.values(), PlanStats())


class DueAhead:
    """The latest histogram of jobs due ahead of every cluster one process plans."""

    def __init__(self) -> None:
        self._counts: dict[int, DueCounts] = {}

    def combined(self, cluster: int, counts: DueCounts) -> DueCounts:
        """Record ``cluster``'s ``counts``; every cluster's latest, in time order."""
        self._counts[cluster] = counts
        if len(self._counts) == 1:
            return counts
        return sorted((c for found in self._counts.values() for c in found), key=itemgetter(0))

    def forget(self, cluster: int) -> None:
        """A cluster whose round failed: its counts may be stale, its jobs are not planned."""
        self._counts.pop(cluster, None)


class ClusterPlanners:
    """``planners``: (cluster index, its planner) pairs, run in this order every round."""

    def __init__(
        self,
        planners: Sequence[tuple[int, Planner]],
        *,
        retry_interval: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        due_ahead: DueAhead | None = None,
    ) -> None:
        self.planners = tuple(planners)
        self.due_ahead = due_ahead
        self.retry_interval = retry_interval
        self._monotonic = monotonic
        self._retry_at: dict[int, float] = {}
        self._partition_day: dict[int, date] = {}

    @classmethod
    def build(
        cls,
        shard_map: ShardMap,
        stores: Sequence[PlannerStore],
        producer: RecordProducer,
        catalog: TopicCatalog,
        config: PlannerConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        ownership: ShardOwner | None = None,
        member: str = "planner",
    ) -> ClusterPlanners:
        """A planner per cluster holding any of ``config.shards`` (``stores[i]``: cluster ``i``
        of ``shard_map``, as ``ClusterStores.stores``); the home cluster's store is the others'
        ``home`` (target limits, the forecast)."""
        if len(stores) != shard_map.size:
            raise ConfigError(f"{len(stores)} stores for a shard map of {shard_map.size} clusters")
        home_index = shard_map.cluster_of[0]
        home = stores[home_index]
        configured = set(config.shards)
        planners: list[tuple[int, Planner]] = []
        several = shard_map.size > 1
        due_ahead = DueAhead() if several else None
        rate = PlanningRate(config.planning_rate, min_jobs=config.batch_size)
        for index, store in enumerate(stores):
            shards = tuple(sorted(configured & shard_map.shards_of(index)))
            if not shards:
                continue  # none of this planner's shards live there
            planner = Planner(
                store,
                producer,
                catalog,
                replace(config, shards=shards) if several else config,
                monotonic=monotonic,
                ownership=ownership,
                member=member,
                home=None if index == home_index else home,
                due_ahead=None if due_ahead is None else partial(due_ahead.combined, index),
                rate=rate,
            )
            planners.append((index, planner))
        return cls(planners, monotonic=monotonic, due_ahead=due_ahead)

    def run_once(self, today: date) -> ClusterRound:
        """One round on every cluster not pausing after a failure: its runs partitions (when
        ``today`` changed), then ``Planner.run_once`` at the current monotonic instant."""
        stats: dict[int, PlanStats] = {}
        failed: list[int] = []
        for index, planner in self.planners:
            now = self._monotonic()
            if now < self._retry_at.get(index, now):
                continue
            try:
                if self._partition_day.get(index) != today:
                    planner.ensure_partitions(today)
                    self._partition_day[index] = today
                stats[index] = planner.run_once(self._monotonic())
            except DuetimeError as exc:
                # This cluster's PostgreSQL (or the broker) is away: the others go on.
                event(log, "planner.round_failed", logging.ERROR, cluster=index, error=exc)
                self._retry_at[index] = self._monotonic() + self.retry_interval
                if self.due_ahead is not None:
                    self.due_ahead.forget(index)
                failed.append(index)
                continue
            self._retry_at.pop(index, None)
        return ClusterRound(stats, tuple(failed))

    def close(self) -> None:
        """Settle what each planner still has in flight and stop their settling threads."""
        for _index, planner in self.planners:
            try:
                planner.close()
            except DuetimeError as exc:  # the cluster is away: its publication is recovered
                event(log, "planner.close_failed", logging.WARNING, error=exc)

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest cluster pausing after a failure may try again."""
        if not self._retry_at:
            return None
        return max(0.0, min(self._retry_at.values()) - self._monotonic())
