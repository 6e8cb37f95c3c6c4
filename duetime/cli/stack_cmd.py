"""`duetime stack up|down|status`: the embedded PostgreSQL, broker and etcd for local work.

``up`` prints the URLs as ``KEY=VALUE`` lines on stdout (progress goes to stderr), so
``eval "$(duetime stack up)"`` exports them; they are also written to ``<data dir>/stack.env``,
where every other ``duetime`` command finds them. ``status`` exits 0 only if every component is
healthy, so scripts can wait on it.

``up --pg-clusters N`` runs N PostgreSQL clusters (``postgres``, ``postgres-2``, ...) and writes
``DUETIME_SHARD_MAP`` placing the shards evenly on them; ``status`` shows one row per cluster.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duetime.config import default_data_dir

if TYPE_CHECKING:
    from duetime_infra import EmbeddedStack

__all__ = ["add_pg_clusters_option", "register"]


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "stack",
        help="start, stop or check the embedded PostgreSQL, Kafka-protocol broker and etcd",
        description=(
            "Manage the local stack kept in a data dir. A component whose URL is set in the "
            "environment (DUETIME_DATABASE_URL or DUETIME_SHARD_MAP, DUETIME_KAFKA_BOOTSTRAP, "
            "DUETIME_ETCD_ENDPOINTS) is not started; that external server is health-checked and "
            "used instead."
        ),
    )
    actions = parser.add_subparsers(dest="stack_action", required=True)

    up = actions.add_parser("up", help="start what is not running (idempotent), print the URLs")
    _add_data_dir(up)
    up.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not apply the schema migrations after PostgreSQL is up",
    )
    add_pg_clusters_option(up)
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop the servers this data dir started")
    _add_data_dir(down)
    down.set_defaults(func=_down)

    status = actions.add_parser(
        "status", help="show each component's pid, URL and health (exit 1 if any is unhealthy)"
    )
    _add_data_dir(status)
    status.set_defaults(func=_status)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where pids, logs and server data live (default: $DUETIME_DATA_DIR or ./.duetime)",
    )


def add_pg_clusters_option(parser: argparse.ArgumentParser) -> None:
    """``--pg-clusters N``, for ``stack up`` and ``up``."""
    parser.add_argument(
        "--pg-clusters",
        type=_pg_clusters,
        default=None,
        metavar="N",
        help=f"PostgreSQL clusters to run, 1 to {_MAX_PG_CLUSTERS}, the shards spread evenly "
        "on them (default: as many as the data dir holds, else 1; fixed once it holds data)",
    )


# duetime_infra.MAX_PG_CLUSTERS, not imported: `duetime --help` must not load the stack.
_MAX_PG_CLUSTERS = 8


def _pg_clusters(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_PG_CLUSTERS:
        raise argparse.ArgumentTypeError(
            f"the number of PostgreSQL clusters must be 1 to {_MAX_PG_CLUSTERS}, not {raw!r}"
        )
    return int(raw)


def _stack(args: argparse.Namespace, *, migrate: bool = True) -> EmbeddedStack:
    # Imported here so that `duetime --help` and unrelated commands stay fast.
    from duetime_infra import EmbeddedStack

    _configure_logging()
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    pg_clusters: int | None = getattr(args, "pg_clusters", None)
    return EmbeddedStack(data_dir, migrate=migrate, pg_clusters=pg_clusters)


def _configure_logging() -> None:
    """Show the stack's progress on stderr unless the caller configured logging already."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")


def _up(args: argparse.Namespace) -> int:
    stack = _stack(args, migrate=not args.no_migrate)
    urls = stack.up()
    for key, value in urls.as_env().items():
        # Quoted where the shell needs it: a shard map's ``;`` would end the assignment.
        print(f"{key}={shlex.quote(value)}")
    return 0


def _down(args: argparse.Namespace) -> int:
    _stack(args).down()
    return 0


def _status(args: argparse.Namespace) -> int:
    statuses = _stack(args).status()
    rows = [("COMPONENT", "PID", "HEALTHY", "URL")]
    for status in statuses:
        pid = "external" if status.external else (str(status.pid) if status.pid else "-")
        rows.append((status.name, pid, "yes" if status.healthy else "no", status.url or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        print("  ".join([*padded, row[3]]))
    return 0 if statuses and all(status.healthy for status in statuses) else 1
