"""``duetime runs list``: run history, newest first."""

from __future__ import annotations

import argparse
from typing import Any

from ._output import print_json, print_table
from ._store import cli_store

_COLUMNS = (
    "run_id",
    "job_id",
    "scheduled_for",
    "due_at",
    "state",
    "attempt",
    "started_at",
    "finished_at",
)


def register(sub: Any) -> None:
    parser = sub.add_parser("runs", help="inspect runs")
    runs = parser.add_subparsers(dest="runs_command", required=True)
    listing = runs.add_parser("list", help="list runs, newest first")
    listing.add_argument("--job", help="only the runs of this job id")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    store = cli_store()
    try:
        rows = [dict(r._mapping) for r in store.runs_list(args.job, args.limit)]
    finally:
        store.close()
    if args.json:
        extra = ("released_at", "throttled_ms", "last_error")
        print_json([{**{c: r[c] for c in _COLUMNS}, **{c: r[c] for c in extra}} for r in rows])
    else:
        print_table(rows, _COLUMNS)
    return 0
