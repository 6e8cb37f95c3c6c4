"""``duetime service reaper``: expire leases, retry or bury runs, send alerts, until signalled.

Four threads: the lease stream (``stream``: heartbeats and results -> expiry, as leases pass),
the alerts (``alerting``), the hourly archive of old runs partitions (``archiving``, when object
storage is configured), and this loop, which publishes dead runs every ``tick`` and runs the
safety-net scan of expired leases every ``scan_interval`` (the first one a whole interval after
the start: the stream, read again from its committed offsets, covers the time the reaper was
down).

With several PostgreSQL clusters (``DUETIME_SHARD_MAP``) every part works on every cluster, one
pass per cluster (``clusters``); the alert queue and the conditions' state are the home
cluster's.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from duetime.bus.kafka import create_topics, make_producer
from duetime.bus.topics import TopicCatalog
from duetime.config import load_settings
from duetime.errors import DuetimeError
from duetime.lifetime import exit_after
from duetime.logs import configure_logging, event
from duetime.metrics import serve_metrics
from duetime.store.clusters import ClusterStores

from .alert_config import AlertConfig
from .alerting import make_alerting
from .archiving import make_periodic_archive
from .config import ReaperConfig, parse_seconds
from .metrics import PipelineSampler, ReaperMetrics
from .reaper import Reaper
from .stream import make_lease_stream

__all__ = ["main"]

log = logging.getLogger("duetime.reaper")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duetime service reaper")
    parser.add_argument("--tick", type=float, default=0.5, help="loop period in seconds")
    parser.add_argument(
        "--alert-webhook",
        default=os.environ.get("DUETIME_ALERT_WEBHOOK"),
        help="the operator's alert webhook (env DUETIME_ALERT_WEBHOOK; docs/runs.md, Alerts)",
    )
    parser.add_argument(
        "--scan-interval",
        default=None,
        help="seconds between safety-net scans of expired leases "
        "(env DUETIME_REAPER_SCAN_INTERVAL, default 30)",
    )
    args = parser.parse_args(argv)
    configure_logging("reaper")
    settings = load_settings()
    config = replace(ReaperConfig.from_env(), tick_interval=timedelta(seconds=args.tick))
    if args.scan_interval is not None:
        config = replace(config, scan_interval=parse_seconds("--scan-interval", args.scan_interval))
    alert_config = replace(AlertConfig.from_env(), webhook=args.alert_webhook or None)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    metrics = ReaperMetrics()
    endpoint = serve_metrics("reaper", os.environ)
    create_topics(settings)
    stores = ClusterStores(settings.clusters(), application_name="duetime-reaper")
    store, clusters = stores.home, stores.stores
    producer = make_producer(settings)
    catalog = TopicCatalog(settings.topic_prefix)
    reaper = Reaper(
        store, producer, catalog, config, on_expired=metrics.count_expired, clusters=clusters
    )
    # Deliveries and condition checks on their own thread: a hung webhook never delays reaping.
    alerting = make_alerting(settings, store, alert_config, clusters=clusters)
    alerting.start()
    stream = make_lease_stream(
        settings, store, config, on_expired=metrics.count_expired, clusters=clusters
    )
    stream.start()
    sampler = PipelineSampler(settings, store, metrics, clusters=clusters)
    sampler.start()
    archive = make_periodic_archive(store, clusters=clusters)
    if archive is not None:
        archive.start()
    event(
        log,
        "reaper.started",
        scan_interval_s=config.scan_interval.total_seconds(),
        clusters=len(clusters),
    )
    scan_at = time.monotonic() + config.scan_interval.total_seconds()
    try:
        while not stop.is_set():
            try:
                if time.monotonic() >= scan_at:
                    scanned = reaper.expire_leases()
                    scan_at = time.monotonic() + config.scan_interval.total_seconds()
                    # Anything the scan finds, the stream missed (each is a lease.expired line).
                    level = logging.INFO if scanned.expired else logging.DEBUG
                    event(log, "reaper.scanned", level, expired=scanned.expired)
                published = reaper.publish_dead()
                metrics.count_dead_published(published)
            except DuetimeError as exc:
                event(log, "reaper.round_failed", logging.ERROR, error=exc)
                stop.wait(2.0)
                continue
            if not published:
                stop.wait(config.tick_interval.total_seconds())
    finally:
        event(log, "reaper.stopping")
        # The clean-up below may wait on a broker or database that is gone: it gets 8 s, within
        # the 10 s duetime up grants a service before SIGKILL, then the process ends anyway.
        exit_after(8.0, "reaper")
        stream.stop(3.0)
        sampler.stop()
        alerting.stop()
        if archive is not None:
            archive.stop()
        producer.flush(5)
        stores.close()
        if endpoint is not None:
            endpoint.close()
    return 0
