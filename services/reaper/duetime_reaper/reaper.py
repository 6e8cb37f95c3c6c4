"""The reaper's round: the safety-net scan of expired leases, and dead runs -> alert + dead topic.

Leases are judged by the database clock (``lease_expires_at < now()``), the same clock that set
them, so a skewed reaper host cannot expire a healthy worker early. Ending an attempt is a fenced
update on the attempt's lease token: if the worker completed (or renewed) in the meantime, the
update matches nothing and the reaper leaves the run alone.

Expiry is driven by the heartbeat stream (``stream``); the scan here is the safety net for
attempts the stream never showed (the broker lost its log, a partition nobody held). The service
runs it every ``scan_interval``; ``run_once`` does a whole round, scan included, for tools and
tests. A scan ends its expired leases a batch at a time: one statement finds and locks them, one
ends them all (``expiry``), never a statement per run.

With several PostgreSQL clusters both run once per cluster (``clusters.each_cluster``: one
failing cluster is logged and the others go on); the dead runs' alerts are raised in the home
cluster, which keeps the alert queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import Producer

from duetime.bus.topics import TopicCatalog
from duetime.store import Store

from .clusters import each_cluster
from .config import ReaperConfig
from .dead_runs import DeadRunPublisher
from .expiry import ExpiryCounts, LeaseExpirer

__all__ = ["ReapStats", "Reaper"]

log = logging.getLogger("duetime.reaper")


@dataclass(frozen=True)
class ReapStats:
    expired: int = 0
    retried: int = 0
    dead: int = 0
    dead_published: int = 0


class Reaper:
    """The scan and the dead runs of every cluster.

    Args:
        store: the home cluster (shard 0's): it keeps the alert queue.
        clusters: every cluster's store, the home cluster's included, in cluster order; by
            default ``store`` alone (one cluster).
    """

    def __init__(
        self,
        store: Store,
        producer: Producer,
        catalog: TopicCatalog,
        config: ReaperConfig | None = None,
        on_expired: Callable[[ExpiryCounts, str], None] | None = None,
        *,
        clusters: Sequence[Store] = (),
    ) -> None:
        self.store = store
        self.stores: tuple[Store, ...] = tuple(clusters) or (store,)
        self.producer = producer
        self.catalog = catalog
        self.config = config or ReaperConfig()
        self.expirers = [
            LeaseExpirer(s, batch_size=self.config.batch_size, on_expired=on_expired)
            for s in self.stores
        ]
        self.dead_runs = [
            DeadRunPublisher(
                s,
                producer,
                catalog,
                batch_size=self.config.batch_size,
                publish_timeout=self.config.publish_timeout,
                alerts=store,
            )
            for s in self.stores
        ]

    def run_once(self) -> ReapStats:
        counts = self.expire_leases()
        published = self.publish_dead()
        return ReapStats(
            expired=counts.expired,
            retried=counts.retried,
            dead=counts.dead,
            dead_published=published,
        )

    def expire_leases(self) -> ExpiryCounts:
        """The safety-net scan: end every lease each cluster finds expired, a batch (two
        statements) at a time."""
        return sum(each_cluster("scan", self.expirers, self._scan), ExpiryCounts())

    def _scan(self, expirer: LeaseExpirer) -> ExpiryCounts:
        total = ExpiryCounts()
        while True:
            counts = expirer.scan()
            total += counts
            if counts.expired < self.config.batch_size:
                return total

    def publish_dead(self) -> int:
        """Raise each new dead run's alert and publish it on the dead topic (``dead_runs``),
        a batch per cluster."""
        return sum(each_cluster("dead_runs", self.dead_runs, DeadRunPublisher.run_once))
