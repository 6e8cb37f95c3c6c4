"""``duetime service reaper``: expire leases, retry or bury runs, send alerts, until signalled."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from duetime.bus.kafka import create_topics, make_producer
from duetime.bus.topics import TopicCatalog
from duetime.config import load_settings
from duetime.errors import DuetimeError
from duetime.lifetime import exit_after
from duetime.logs import configure_logging, event
from duetime.store import Store

from .alert_config import AlertConfig
from .alerting import make_alerting
from .config import ReaperConfig
from .reaper import Reaper

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
    args = parser.parse_args(argv)
    configure_logging("reaper")
    settings = load_settings()
    config = ReaperConfig(tick_interval=timedelta(seconds=args.tick))
    alert_config = replace(AlertConfig.from_env(), webhook=args.alert_webhook or None)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    create_topics(settings)
    store = Store(settings.require_database(), application_name="duetime-reaper")
    producer = make_producer(settings)
    reaper = Reaper(store, producer, TopicCatalog(settings.topic_prefix), config)
    # Deliveries and condition checks on their own thread: a hung webhook never delays reaping.
    alerting = make_alerting(settings, store, alert_config)
    alerting.start()
    event(log, "reaper.started")
    try:
        while not stop.is_set():
            try:
                stats = reaper.run_once()
            except DuetimeError as exc:
                event(log, "reaper.round_failed", logging.ERROR, error=exc)
                stop.wait(2.0)
                continue
            if not (stats.expired or stats.dead_published):
                stop.wait(config.tick_interval.total_seconds())
    finally:
        event(log, "reaper.stopping")
        # The clean-up below may wait on a broker or database that is gone: it gets 8 s, within
        # the 10 s duetime up grants a service before SIGKILL, then the process ends anyway.
        exit_after(8.0, "reaper")
        alerting.stop()
        producer.flush(5)
        store.close()
    return 0
