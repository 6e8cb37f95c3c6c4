"""Prometheus ``/metrics`` for every service: where it listens, and metrics updated per batch.

Each service process serves its own registry on ``DUETIME_METRICS_HOST``:``DUETIME_METRICS_PORT``
(host 127.0.0.1 by default; port unset or 0 = no endpoint). ``duetime up`` gives every service
it starts a port of its own and prints the URLs. The metrics themselves are defined by each
service (``duetime_<service>.metrics``); docs/metrics.md is the table.

The hot paths (a dispatcher releasing 100k runs in a second, workers claiming and completing
them) count **per batch**: ``counter.inc(len(batch))`` once per statement or release round,
never once per run, and no label takes a run's or job's id. :class:`BatchHistogram` does the
same for the lateness histogram: a whole round's values are sorted once and counted into the
buckets under one lock.

The worker service runs several processes; their counters are merged by prometheus-client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by the worker supervisor), and only the
supervisor listens (``duetime_workers.processes``).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from duetime.errors import ConfigError
from duetime.logs import event

__all__ = [
    "LATENESS_BUCKETS",
    "METRICS_HOST_ENV",
    "METRICS_PORT_ENV",
    "RUN_END_METRICS",
    "BatchHistogram",
    "MetricsEndpoint",
    "metrics_address",
    "serve_metrics",
]

METRICS_PORT_ENV = "DUETIME_METRICS_PORT"
METRICS_HOST_ENV = "DUETIME_METRICS_HOST"

#: Seconds. Fine below 100 ms (a healthy release is a few ms late), coarse up to minutes (an
#: outage's catch-up).
LATENESS_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

#: The counters of how an attempt ended, by the state its run went to (``fenced``: the end was
#: refused), as (name, help). Shared by the services that end attempts (the worker, and the API
#: for async targets' completions) so that a counter summed over them is the total.
RUN_END_METRICS: dict[str, tuple[str, str]] = {
    "succeeded": ("duetime_runs_succeeded", "Attempts that succeeded, completion accepted"),
    "scheduled": (
        "duetime_runs_retried",
        "Failed attempts whose run is scheduled again after its backoff",
    ),
    "dead": ("duetime_runs_dead", "Runs that went dead (final failure or last attempt)"),
    "fenced": (
        "duetime_completions_fenced",
        "Completions the database rejected: the attempt's lease token no longer held",
    ),
}

log = logging.getLogger("duetime.metrics")


def metrics_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    """``(host, port)`` of the endpoint ``env`` asks for, or None when it asks for none."""
    raw = env.get(METRICS_PORT_ENV, "").strip()
    if not raw or raw == "0":
        return None
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{METRICS_PORT_ENV} must be a port number, not {raw!r}") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{METRICS_PORT_ENV} must be between 1 and 65535, not {port}")
    return env.get(METRICS_HOST_ENV, "").strip() or "127.0.0.1", port


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` server; ``close()`` stops it."""

    url: str
    server: WSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(2.0)


def serve_metrics(
    service: str,
    env: Mapping[str, str],
    registry: CollectorRegistry = REGISTRY,
) -> MetricsEndpoint | None:
    """Serve ``registry`` where ``env`` says (``metrics.listening`` with the URL), or nothing.

    A port that cannot be bound (taken by another process) is logged as ``metrics.failed`` at
    ERROR and the service runs on without an endpoint: scheduling matters more than its
    metrics, and the scraper's ``up == 0`` shows the gap (infra/prometheus/alerts.yml).
    """
    address = metrics_address(env)
    if address is None:
        return None
    host, port = address
    # ``*_created`` series double every counter's output and nothing here reads them.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        event(
            log,
            "metrics.failed",
            logging.ERROR,
            address=f"{host}:{port}",
            error=exc,
        )
        return None
    url = f"http://{host}:{port}/metrics"
    event(log, "metrics.listening", url=url)
    return MetricsEndpoint(url, server, thread)


class BatchHistogram(Collector):
    """A histogram fed a batch of observations at a time (one lock, one sort per batch).

    prometheus-client's ``Histogram.observe`` takes a lock and walks the buckets for every value;
    at 100k releases in a second that is the per-run work the dispatcher must not do. This one
    keeps plain integer bucket counts and exposes them as a standard histogram on collect.
    It is registered in ``registry`` (default: the process's) when made.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float] = LATENESS_BUCKETS,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError("buckets must be distinct and not empty")
        self.name = name
        self.documentation = documentation
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe_many(self, values: Iterable[float], scale: float = 1.0) -> None:
        """Count every value of one batch; ``scale`` is how many of the values' unit make one
        of the histogram's (1000 for milliseconds into a ``_seconds`` histogram)."""
        ordered = sorted(values)
        if not ordered:
            return
        total = sum(ordered) / scale
        # Values <= bound land in that bucket (Prometheus's ``le``): bisect_right per bound.
        cuts = [bisect.bisect_right(ordered, bound * scale) for bound in self._bounds]
        with self._lock:
            previous = 0
            for index, cut in enumerate(cuts):
                self._counts[index] += cut - previous
                previous = cut
            self._counts[-1] += len(ordered) - previous
            self._sum += total

    def snapshot(self) -> tuple[list[tuple[str, float]], float, int]:
        """Cumulative ``(le, count)`` pairs, the sum, and the number of observations."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip([*self._bounds, float("inf")], counts, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return cumulative, total, running

    def collect(self) -> Iterator[HistogramMetricFamily]:
        buckets, total, _count = self.snapshot()
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], buckets, total)
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation)
