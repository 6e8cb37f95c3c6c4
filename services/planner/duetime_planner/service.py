"""``duetime service planner``: ingest, plan, publish and sweep in a loop until signalled."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer

from duetime.bus.kafka import consumer_config, create_topics, make_producer
from duetime.bus.topics import TopicCatalog
from duetime.config import load_settings
from duetime.errors import DuetimeError
from duetime.logs import configure_logging, event
from duetime.metrics import serve_metrics
from duetime.store import Store

from .config import PlannerConfig
from .ingest import JobIngest
from .metrics import PlannerMetrics
from .planner import Planner

__all__ = ["main"]

log = logging.getLogger("duetime.planner")


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
    parser.add_argument("--tick", type=float, default=0.5, help="loop period in seconds")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    configure_logging("planner")
    settings = load_settings()
    config = PlannerConfig(
        lookahead=timedelta(seconds=args.lookahead),
        max_lookahead=timedelta(seconds=max(args.max_lookahead, args.lookahead)),
        tick_interval=timedelta(seconds=args.tick),
        batch_size=args.batch_size,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    catalog = TopicCatalog(settings.topic_prefix)
    metrics = PlannerMetrics()
    endpoint = serve_metrics("planner", os.environ)
    create_topics(settings)
    store = Store(settings.require_database(), application_name="duetime-planner")
    producer = make_producer(settings)
    consumer = Consumer(consumer_config(settings, f"{settings.topic_prefix}planner-ingest"))
    planner = Planner(store, producer, catalog, config)
    ingest = JobIngest(store, consumer, producer, catalog, batch_size=config.batch_size)
    event(log, "planner.started", shards=len(config.shards), lookahead_s=args.lookahead)
    last_partition_day = None
    try:
        while not stop.is_set():
            today = datetime.now(UTC).date()
            try:
                if today != last_partition_day:
                    planner.ensure_partitions(today)
                    last_partition_day = today
                ingested = ingest.run_once(timeout=0.0)
                stats = planner.run_once()
                metrics.record_round(stats, ingested)
            except DuetimeError as exc:
                # Postgres or the broker is away: keep the process alive and try again.
                event(log, "planner.round_failed", logging.ERROR, error=exc)
                stop.wait(2.0)
                continue
            idle = not (ingested.accepted or ingested.rejected or stats.runs_created)
            if idle:
                stop.wait(config.tick_interval.total_seconds())
    finally:
        event(log, "planner.stopping")
        consumer.close()
        producer.flush(5)
        store.close()
        if endpoint is not None:
            endpoint.close()
    return 0
