"""``duetime service planner``: ingest, plan, publish and sweep in a loop until signalled.

With etcd configured (``DUETIME_ETCD_ENDPOINTS``, as ``duetime up`` sets it) the planner owns
shards under an etcd lease (``duetime.coord``) and fences its writes in PostgreSQL; without it,
or with ``--shard-mode skip-locked``, it competes for every shard's due rows with SKIP LOCKED.
With a shard map (``DUETIME_SHARD_MAP``) it plans every cluster, one after another
(``clusters.py``), and the ingest writes each job to its cluster.

A stop ends the process within ``STOP_DEADLINE`` of the signal, whatever the round in progress
or the clean-up is waiting for (a database, broker or etcd that is gone): exit status 70 then.
Nothing is lost by that: what was planned is in PostgreSQL, what was not is planned next time.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer

from duetime.bus.kafka import consumer_config, create_topics, make_producer
from duetime.bus.topics import TopicCatalog
from duetime.collector import freeze_startup
from duetime.config import Settings, load_settings
from duetime.coord.etcd import EtcdBackend, etcd_root, parse_endpoints
from duetime.coord.ownership import OwnershipConfig
from duetime.coord.runner import OwnershipThread
from duetime.errors import ConfigError, DuetimeError
from duetime.lifetime import exit_after_stop
from duetime.logs import configure_logging, event
from duetime.metrics import serve_metrics
from duetime.store.clusters import ClusterStores

from .clusters import ClusterPlanners
from .config import PlannerConfig
from .guard import SECRET_ENV, JobsTopicGuard
from .ingest import IngestStats, JobIngest
from .metrics import PlannerMetrics
from .ports import ShardOwner

__all__ = ["STOP_DEADLINE", "main"]

log = logging.getLogger("duetime.planner")
_SHARD_MODES = ("auto", "etcd", "skip-locked")
# After a failure (PostgreSQL or the broker away), seconds before the failed part tries again.
_RETRY_PAUSE = 2.0
#: Seconds from the stop signal to the end of the process, done or not: within the 10 s
#: ``duetime up`` gives a service before SIGKILL.
STOP_DEADLINE = 8.0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="duetime service planner")
    defaults = PlannerConfig()
    parser.add_argument(
        "--lookahead",
        type=float,
        default=defaults.lookahead.total_seconds(),
        help="publish runs at least this many seconds before they are due (default 30)",
    )
    parser.add_argument(
        "--max-lookahead",
        type=float,
        default=defaults.max_lookahead.total_seconds(),
        help="how far ahead a coming spike may be planned, in seconds (default 600)",
    )
    parser.add_argument(
        "--refill",
        type=float,
        default=defaults.refill.total_seconds(),
        help="plan a due job this many seconds beyond the lookahead, so a frequent job is "
        f"visited once per that many seconds of runs (default {defaults.refill.total_seconds():g})",
    )
    parser.add_argument("--tick", type=float, default=0.5, help="loop period in seconds")
    parser.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="jobs planned per transaction"
    )
    parser.add_argument(
        "--batch-runs",
        type=int,
        default=defaults.batch_runs,
        help="runs planned per transaction, about: frequent jobs are planned in time slices "
        f"(default {defaults.batch_runs})",
    )
    parser.add_argument(
        "--on-time-grace",
        type=float,
        default=defaults.on_time_grace.total_seconds(),
        help="an occurrence older than this many seconds when planned counts as missed, and its "
        "job's catch-up policy decides (default 60)",
    )
    parser.add_argument(
        "--shard-mode",
        choices=_SHARD_MODES,
        default=os.environ.get("DUETIME_SHARD_MODE", "auto"),
        help="etcd: own shards under an etcd lease, fenced in PostgreSQL; skip-locked: compete "
        "for every shard's rows; auto (default, or DUETIME_SHARD_MODE): etcd when "
        "DUETIME_ETCD_ENDPOINTS is set",
    )
    parser.add_argument(
        "--lease-ttl",
        type=int,
        default=int(OwnershipConfig().ttl.total_seconds()),
        help="etcd mode: the planner's lease TTL in seconds (default 10); it stops working its "
        "shards 2 s before a lease whose keepalives fail could expire",
    )
    return parser.parse_args(argv)


def _ownership(args: argparse.Namespace, settings: Settings, member: str) -> OwnershipThread | None:
    mode = args.shard_mode
    if mode not in _SHARD_MODES:
        raise ConfigError(f"shard mode must be one of {', '.join(_SHARD_MODES)}, not {mode!r}")
    if mode == "auto":
        mode = "etcd" if settings.etcd_endpoints else "skip-locked"
    if mode == "skip-locked":
        return None
    if not settings.etcd_endpoints:
        raise ConfigError("--shard-mode etcd needs DUETIME_ETCD_ENDPOINTS")
    endpoints = settings.etcd_endpoints
    parse_endpoints(endpoints)  # a bad endpoint fails the start, not the ownership thread
    root = etcd_root(settings.topic_prefix)
    ttl = timedelta(seconds=args.lease_ttl)
    config = OwnershipConfig(ttl=ttl, margin=min(timedelta(seconds=2), ttl / 4))
    return OwnershipThread(lambda: EtcdBackend.from_endpoints(endpoints, root), member, config)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    configure_logging("planner")
    settings = load_settings()
    config = PlannerConfig(
        lookahead=timedelta(seconds=args.lookahead),
        max_lookahead=timedelta(seconds=max(args.max_lookahead, args.lookahead)),
        refill=timedelta(seconds=args.refill),
        tick_interval=timedelta(seconds=args.tick),
        batch_size=args.batch_size,
        batch_runs=args.batch_runs,
        on_time_grace=timedelta(seconds=args.on_time_grace),
        hot_horizon=settings.hot_horizon,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    exit_after_stop(stop, STOP_DEADLINE, "planner")

    catalog = TopicCatalog(settings.topic_prefix)
    clusters = ClusterStores(
        settings.clusters(),
        application_name="duetime-planner",
        hot_horizon=settings.hot_horizon,
    )
    metrics = PlannerMetrics(clusters=len(clusters))
    endpoint = serve_metrics("planner", os.environ)
    create_topics(settings)
    producer = make_producer(settings)
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}planner-ingest"))
    member = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    owner_thread = _ownership(args, settings, member)
    owner: ShardOwner | None = owner_thread
    if owner_thread is not None:
        owner_thread.start()
    planners = ClusterPlanners.build(
        clusters.shard_map,
        clusters.stores,
        producer,
        catalog,
        config,
        monotonic=time.monotonic,
        ownership=owner,
        member=member,
    )
    guard = JobsTopicGuard.from_env()
    if guard is None:
        # Anyone who may produce to the jobs topic writes any tenant (docs/api.md).
        event(log, "jobs.guard_off", reason=f"{SECRET_ENV} is not set")
    else:
        event(log, "jobs.guard_on", topic=catalog.jobs)
    ingest = JobIngest(
        clusters, consumer, producer, catalog, batch_size=config.batch_size, guard=guard
    )
    event(
        log,
        "planner.started",
        member=member,
        shard_mode="skip-locked" if owner is None else "etcd",
        shards=len(config.shards),
        clusters=len(clusters),
        lookahead_s=args.lookahead,
    )
    freeze_startup()  # what start-up built lives as long as the process (collector.py)
    ingest_retry_at = 0.0
    try:
        while not stop.is_set():
            ingested = IngestStats()
            if time.monotonic() >= ingest_retry_at:
                try:
                    ingested = ingest.run_once(timeout=0.0)
                except DuetimeError as exc:
                    # A cluster or the broker is away: the batch is read again after a pause,
                    # and planning goes on meanwhile (docs/clusters.md).
                    event(log, "planner.round_failed", logging.ERROR, stage="ingest", error=exc)
                    ingest_retry_at = time.monotonic() + _RETRY_PAUSE
            metrics.record_ingest(ingested)
            planned = planners.run_once(datetime.now(UTC).date())
            for index, stats in planned.stats.items():
                metrics.record_plan(stats, cluster=index)
            for index in planned.failed:
                metrics.record_failed(cluster=index)
            if not planned.stats:
                # Every cluster is away (or pausing after a failure): wait for the first retry.
                pause = planners.next_retry_in()
                stop.wait(_RETRY_PAUSE if pause is None else pause)
                continue
            idle = not (ingested.accepted or ingested.rejected or planned.total.runs_created)
            if idle:
                stop.wait(config.tick_interval.total_seconds())
    finally:
        event(log, "planner.stopping")
        if owner_thread is not None:
            owner_thread.stop()
        consumer.close()
        planners.close()
        producer.flush(5)
        clusters.close()
        if endpoint is not None:
            endpoint.close()
    return 0
