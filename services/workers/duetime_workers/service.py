"""Entry point: ``duetime-worker`` options, settings, logging, and the service's exit code.

Registered as entry point ``worker`` in group ``duetime.services`` (so ``duetime`` can start it
without importing this package) and runnable as ``python -m duetime_workers``. Exit codes:
0 after a clean shutdown, 1 when the worker failed, 2 for unusable settings, 70 when a stop
overran its deadline (``shutdown_grace`` + 3 s, 8 s by default: within the 10 s ``duetime up``
gives a service before SIGKILL, whatever the database or the broker is doing).

With ``--processes N`` (default: one per CPU core) this process supervises N worker processes
(:mod:`duetime_workers.processes`): Python runs one thread of Python at a time, and a worker's
per-run CPU work (decoding, the target call, bookkeeping) needs every core at a spike.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from duetime.collector import freeze_startup, young_generation
from duetime.config import load_settings
from duetime.errors import ConfigError, DuetimeError
from duetime.lifetime import exit_after_stop
from duetime.metrics import serve_metrics

from .config import WorkerConfig
from .logs import configure_logging, event
from .metrics import WorkerMetrics
from .processes import child_argv, die_with_parent, process_count, supervise
from .secret_store import check_secrets_dir
from .worker import WorkerService

__all__ = ["build_config", "main", "parser", "stop_deadline"]

# What a stop may take beyond the shutdown grace: the hand-back (one statement, bounded by the
# leases), the offsets' commit, leaving the group and the producer's flush. Without it, a worker
# whose database is gone waited out every deadline in turn (about 25 s).
_AFTER_GRACE = timedelta(seconds=3)
# A supervisor of worker processes kills those still running this long after their deadline.
_KILL_AFTER_DEADLINE = timedelta(seconds=1)
# Net tracked allocations between young collections (the default is 700).
_YOUNG_GENERATION = 50_000


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="duetime-worker",
        description="Execute due runs from runs.ready: claim, call the target, complete.",
    )
    p.add_argument("--worker-id", help="name on leases and in logs (env DUETIME_WORKER_ID)")
    p.add_argument(
        "--concurrency",
        type=int,
        help="execution slots per process (env DUETIME_WORKER_CONCURRENCY, default 256)",
    )
    p.add_argument(
        "--processes",
        type=int,
        help="worker processes (env DUETIME_WORKER_PROCESSES, default: one per CPU core)",
    )
    p.add_argument(
        "--allow-private-targets",
        action="store_true",
        default=None,
        help="let HTTP targets reach private addresses (env DUETIME_ALLOW_PRIVATE_TARGETS=1)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        metavar="SECONDS",
        help="time in-flight attempts get at shutdown before they are handed back "
        "(env DUETIME_WORKER_SHUTDOWN_GRACE, default 5)",
    )
    p.add_argument(
        "--secrets-dir",
        type=Path,
        metavar="DIR",
        help="directory of secret files for header references (env DUETIME_SECRETS_DIR)",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("DUETIME_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
    )
    return p


def build_config(args: argparse.Namespace) -> WorkerConfig:
    """The environment's config with the command-line options on top."""
    config = WorkerConfig.from_env()
    if args.worker_id:
        config = replace(config, worker_id=args.worker_id)
    if args.concurrency is not None:
        config = replace(config, concurrency=args.concurrency)
    if args.allow_private_targets:
        config = replace(config, allow_private_targets=True)
    if args.shutdown_grace is not None:
        config = replace(config, shutdown_grace=timedelta(seconds=args.shutdown_grace))
    if args.secrets_dir is not None:
        config = replace(config, secrets_dir=args.secrets_dir)
    if config.secrets_dir is not None:
        check_secrets_dir(config.secrets_dir)
    return config


def stop_deadline(config: WorkerConfig) -> timedelta:
    """How long after a stop is requested the worker process ends, done or not."""
    return config.shutdown_grace + _AFTER_GRACE


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        config = build_config(args)
        settings = load_settings()
        settings.require_database()
        settings.require_kafka()
        count = process_count(args.processes, os.environ)
    except ConfigError as exc:
        event("worker.config_error", logging.ERROR, error=str(exc))
        return 2
    if count > 1:
        stop_timeout = stop_deadline(config) + _KILL_AFTER_DEADLINE
        return supervise(
            count,
            config.worker_id,
            child_argv(argv),
            os.environ,
            stop_timeout=stop_timeout.total_seconds(),
        )
    die_with_parent()
    endpoint = None
    try:
        metrics = WorkerMetrics()
        # A worker process under ``supervise`` gets no port: its supervisor serves the merged
        # counters of all of them.
        endpoint = serve_metrics("worker", os.environ)
        service = WorkerService(settings, config, metrics)
        exit_after_stop(service.stopping, stop_deadline(config).total_seconds(), "worker")
        # Hundreds of attempts in flight, each a few dozen short-lived objects: the collector
        # walked them hundreds of times a second in a spike (duetime/collector.py).
        freeze_startup()
        young_generation(_YOUNG_GENERATION)
        try:
            return asyncio.run(service.run())
        finally:
            # However run() ended: the interpreter's exit joins threads that may hang too.
            service.stopping.set()
    except DuetimeError as exc:
        event("worker.failed", logging.ERROR, error=str(exc))
        return 1
    finally:
        if endpoint is not None:
            endpoint.close()
