"""The reaper's Prometheus metrics (docs/metrics.md), and the pipeline gauges it samples.

Counters are fed once per expiry batch (``LeaseExpirer``'s observer) and once per dead-run round.
The reaper also samples what no single service sees, every ``sample_interval`` on a thread of its
own (a slow broker or database delays the gauges, never reaping): the outbox backlog (scheduled
runs already due but not yet published, through the outbox index) and every consumer group's lag
on its topics (committed offset to high watermark, read from outside the groups). On the local
tansu broker a high watermark read by ListOffsets is wrong when a producer batch held more than
one record, so the lag there is an estimate; on Apache Kafka it is exact.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import timedelta

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from duetime.bus.lag import ConsumerLagProbe
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import DuetimeError
from duetime.logs import event
from duetime.store import Store
from duetime.store.alerts import runs_outbox_backlog

from .expiry import ExpiryCounts

__all__ = ["PipelineSampler", "ReaperMetrics", "consumer_groups"]

log = logging.getLogger("duetime.reaper")

_BACKLOG_CAP = 1_000_000


class ReaperMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.lease_expiries = Counter(
            "duetime_lease_expiries",
            "Attempts ended because their lease expired, by who found it (stream or scan)",
            ["source"],
            registry=registry,
        )
        for source in ("stream", "scan"):
            self.lease_expiries.labels(source)
        self.retried = Counter(
            "duetime_runs_retried",
            "Runs scheduled again after an expired lease (attempts left)",
            registry=registry,
        )
        self.dead = Counter(
            "duetime_runs_dead", "Runs that went dead after an expired lease", registry=registry
        )
        self.dead_published = Counter(
            "duetime_runs_dead_published",
            "Dead runs published on the dead topic (their alert raised)",
            registry=registry,
        )
        self.outbox_backlog = Gauge(
            "duetime_outbox_backlog",
            "Scheduled runs already due but not yet published by the planner's outbox",
            registry=registry,
        )
        self.consumer_lag = Gauge(
            "duetime_consumer_lag",
            "Records a consumer group has not committed on a topic",
            ["group", "topic"],
            registry=registry,
        )

    def count_expired(self, counts: ExpiryCounts, source: str) -> None:
        """One expiry batch's results."""
        if counts.expired:
            self.lease_expiries.labels(source).inc(counts.expired)
        if counts.retried:
            self.retried.inc(counts.retried)
        if counts.dead:
            self.dead.inc(counts.dead)

    def count_dead_published(self, published: int) -> None:
        if published:
            self.dead_published.inc(published)


def consumer_groups(catalog: TopicCatalog) -> dict[str, Sequence[str]]:
    """Every duetime consumer group and the topics it reads."""
    prefix = catalog.prefix
    return {
        f"{prefix}planner-ingest": (catalog.jobs,),
        f"{prefix}dispatcher": catalog.due_topics,
        catalog.workers_group: (catalog.ready,),
        catalog.reaper_group: (catalog.heartbeats, catalog.results),
    }


class PipelineSampler:
    """Sets the outbox-backlog and consumer-lag gauges every ``interval`` until stopped."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        metrics: ReaperMetrics,
        interval: timedelta = timedelta(seconds=15),
        *,
        clusters: Sequence[Store] = (),
    ) -> None:
        """``clusters``: every cluster's store, whose backlogs add up (default: ``store``)."""
        self._stores: tuple[Store, ...] = tuple(clusters) or (store,)
        self._metrics = metrics
        self._interval = interval.total_seconds()
        catalog = TopicCatalog(settings.topic_prefix)
        self._probes = [
            (ConsumerLagProbe(settings, group, topics[0]), topics)
            for group, topics in consumer_groups(catalog).items()
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duetime-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def sample_once(self) -> None:
        """One sample of every gauge; a measurement that fails leaves its gauge as it was."""
        try:
            runs = 0
            for store in self._stores:
                with store.tx() as tx:
                    runs += runs_outbox_backlog(tx, timedelta(0), cap=_BACKLOG_CAP).runs
            self._metrics.outbox_backlog.set(runs)
        except DuetimeError as exc:
            event(log, "metrics.sample_failed", logging.DEBUG, gauge="outbox_backlog", error=exc)
        for probe, topics in self._probes:
            for topic in topics:
                try:
                    lag = probe.measure(topic)
                except DuetimeError as exc:
                    event(log, "metrics.sample_failed", logging.DEBUG, gauge="lag", error=exc)
                    continue
                self._metrics.consumer_lag.labels(probe.group, topic).set(lag.total)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sample_once()
                self._stop.wait(self._interval)
        finally:
            for probe, _topics in self._probes:
                probe.close()
