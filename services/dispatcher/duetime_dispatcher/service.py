"""``duetime service dispatcher``: create the topics, then run the faust worker until signalled.

SIGINT and SIGTERM stop it cleanly: the consumer commits the acked prefix of each partition,
the producer flushes, and the process exits 0. Runs still held were never acked, so whichever
dispatcher owns their partitions next reads them again.

A stop has ``stop_grace`` (default 5 s): with the broker gone, the intake's final commit and
the producers' flushes can wait for it for long, so once the grace is over the process ends
regardless (``process.hard_exit``, exit status 70). Nothing is lost by that beyond what any
crash loses: unacked runs are read again.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import faust
from prometheus_client import REGISTRY

from duetime.bus.kafka import create_topics
from duetime.config import load_settings
from duetime.errors import DuetimeError
from duetime.lifetime import exit_after
from duetime.logs import configure_logging, event
from duetime.metrics import serve_metrics

from .app import Dispatcher
from .config import DispatcherConfig
from .metrics import DispatcherCollector

__all__ = ["main"]

log = logging.getLogger("duetime.dispatcher")

MAX_HELD_ENV = "DUETIME_DISPATCHER_MAX_HELD"
CLAIM_AHEAD_ENV = "DUETIME_DISPATCHER_CLAIM_AHEAD"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="duetime service dispatcher",
        description="Release runs from the due topics to runs.ready at their due time.",
    )
    parser.add_argument("--log-level", default=None, help="default: $DUETIME_LOG_LEVEL or INFO")
    parser.add_argument("--max-batch", type=int, default=DispatcherConfig.max_batch)
    parser.add_argument(
        "--max-held",
        type=int,
        default=int(os.environ.get(MAX_HELD_ENV, DispatcherConfig.max_held)),
        help=f"cap on runs held in memory (default: ${MAX_HELD_ENV} or "
        f"{DispatcherConfig.max_held}); the intake pauses at the cap",
    )
    parser.add_argument(
        "--claim-ahead",
        type=float,
        default=float(
            os.environ.get(CLAIM_AHEAD_ENV, DispatcherConfig.claim_ahead.total_seconds())
        ),
        help=f"seconds before its due instant a run for an HTTP target without limits is "
        f"released, for a worker to claim it ahead (default: ${CLAIM_AHEAD_ENV} or "
        f"{DispatcherConfig.claim_ahead.total_seconds():g}; 0: off)",
    )
    parser.add_argument(
        "--instance",
        type=int,
        default=0,
        help="which of several dispatcher processes sharing a data dir this is (default 0)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=DispatcherConfig.stop_grace.total_seconds(),
        help="seconds a stop may take before the process exits regardless (default 5)",
    )
    return parser.parse_args(argv)


class _Worker(faust.Worker):
    """faust's worker, with a deadline on its stop.

    ``stop`` is where every way of stopping passes (a signal, the end of ``start``); the deadline
    starts there, before the shutdown hook commits and closes the consumer, the steps that can hang.
    """

    def __init__(self, *args: Any, stop_grace: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop_grace = stop_grace
        self._stop_deadline: threading.Timer | None = None

    async def stop(self) -> None:
        if self._stop_deadline is None:
            self._stop_deadline = exit_after(self._stop_grace, "dispatcher")
        await super().stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dispatcher in the foreground; returns the process exit code."""
    try:
        args = _parse(argv)
    except ValueError as exc:  # a malformed $DUETIME_DISPATCHER_MAX_HELD or _CLAIM_AHEAD
        configure_logging("dispatcher", None)
        event(
            log,
            "dispatcher.failed",
            logging.ERROR,
            reason=f"{MAX_HELD_ENV} or {CLAIM_AHEAD_ENV}: {exc}",
        )
        return 1
    configure_logging("dispatcher", args.log_level)
    # The dispatcher keeps every held run alive for up to hours: hundreds of thousands of
    # long-lived objects. With the default thresholds (700, 10, 10) the collector runs a full
    # pass over all of them again and again while a spike allocates its releases (measured: 30k
    # due runs took 0.28 s to take off the wheel instead of 0.07 s). The intake also freezes what
    # it holds (duetime_dispatcher/heap.py), so collections walk only what came since.
    gc.set_threshold(100_000, 50, 100)
    try:
        settings = load_settings()
        config = DispatcherConfig(
            max_batch=args.max_batch,
            max_held=args.max_held,
            instance=args.instance,
            stop_grace=timedelta(seconds=args.stop_grace),
            claim_ahead=timedelta(seconds=args.claim_ahead),
        )
        create_topics(settings)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        dispatcher = Dispatcher(settings, config, registry=REGISTRY)
        REGISTRY.register(DispatcherCollector(dispatcher))
        serve_metrics("dispatcher", os.environ)
    except DuetimeError as exc:
        event(log, "dispatcher.failed", logging.ERROR, reason=str(exc))
        return 1
    worker = _Worker(
        dispatcher.app,
        stop_grace=config.stop_grace.total_seconds(),
        quiet=True,
        # Keep duetime's log format (configure_logging above) and stdout untouched.
        override_logging=False,
        redirect_stdouts=False,
        stdout=sys.stderr,
    )
    # The progress spinner writes terminal escape codes; logs are the only output we want.
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
