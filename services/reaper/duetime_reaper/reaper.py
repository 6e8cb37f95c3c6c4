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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Producer

from duetime.bus.topics import TopicCatalog
from duetime.store import Store

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
    def __init__(
        self,
        store: Store,
        producer: Producer,
        catalog: TopicCatalog,
        config: ReaperConfig | None = None,
        on_expired: Callable[[ExpiryCounts, str], None] | None = None,
    ) -> None:
        self.store = store
        self.producer = producer
        self.catalog = catalog
        self.config = config or ReaperConfig()
        self.expirer = LeaseExpirer(store, batch_size=self.config.batch_size, on_expired=on_expired)
        self.dead_runs = DeadRunPublisher(
            store,
            producer,
            catalog,
            batch_size=self.config.batch_size,
            publish_timeout=self.config.publish_timeout,
        )

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
        """The safety-net scan: end every lease the database finds expired, a batch (two
        statements) at a time."""
        total = ExpiryCounts()
        while True:
            counts = self.expirer.scan()
            total += counts
            if counts.expired < self.config.batch_size:
                return total

    def publish_dead(self) -> int:
        """Raise each new dead run's alert and publish it on the dead topic (``dead_runs``)."""
        return self.dead_runs.run_once()
