"""The dispatcher's Prometheus metrics (docs/metrics.md).

Nearly all of them are read at scrape time from the totals the dispatcher keeps anyway (the
``dispatcher.stats`` line prints the same ones), so they cost the release path nothing. The one
exception is the lateness histogram, fed once per release round with the whole round's values
(``BatchHistogram.observe_many``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from duetime.metrics import BatchHistogram

if TYPE_CHECKING:
    from .app import Dispatcher

__all__ = ["DispatcherCollector", "lateness_histogram"]


def lateness_histogram(registry: CollectorRegistry | None = REGISTRY) -> BatchHistogram:
    return BatchHistogram(
        "duetime_release_lateness_seconds",
        "Release lateness: broker acknowledgement of a run on runs.ready (or its Kafka "
        "target's topic) minus its due_at, by the database clock",
        registry=registry,
    )


class DispatcherCollector(Collector):
    """Exposes one dispatcher's running totals and what it holds now."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        d = self._dispatcher
        counters = d.holding.counters
        for name, text, value in (
            ("duetime_runs_received", "Run records read from the due topics", counters.received),
            ("duetime_runs_released", "Runs released (broker-acknowledged)", counters.released),
            (
                "duetime_runs_succeeded",
                "Kafka-target runs emitted by the dispatcher and recorded as succeeded",
                d.recorder.recorded,
            ),
            ("duetime_runs_duplicate", "Run records dropped as duplicates", counters.duplicates),
            ("duetime_runs_undecodable", "Run records that did not decode", counters.undecodable),
            (
                "duetime_runs_release_failures",
                "Releases the broker refused (retried)",
                counters.release_failures,
            ),
            (
                "duetime_runs_throttled",
                "Runs that waited for a grant of their target's rate or concurrency limit",
                d.throttle.throttled_total,
            ),
            (
                "duetime_runs_shed",
                "Held runs dropped to make room (read again later)",
                counters.shed,
            ),
        ):
            family = CounterMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        for name, text, gauge in (
            ("duetime_runs_held", "Runs held in memory until due", d.holding.held),
            (
                "duetime_runs_throttled_waiting",
                "Runs due but waiting for their target's grant",
                d.throttle.waiting,
            ),
            (
                "duetime_intake_paused",
                "1 when the intake is paused at the held cap",
                int(d.intake_paused),
            ),
        ):
            family_g = GaugeMetricFamily(name, text)
            family_g.add_metric([], gauge)
            yield family_g

    def describe(self) -> Iterator[Metric]:
        return iter(())
