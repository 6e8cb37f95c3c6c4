"""``duetime targets set|unset|list``: per-target limits, changed at runtime.

Dispatchers re-read the limits every few seconds (no restart); the numbers a grant uses are
read under the target's row lock, so a lowered limit holds from the next grant on.
docs/flow-control.md has the semantics.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from duetime.errors import InvalidInput, NotFound
from duetime.flow import DEFAULT_TARGET
from duetime.store import flow

from ._output import print_json, print_table
from ._store import cli_store

# An explicit target_service, a URL host or kafka:<topic>; '*' names the default and
# '@catch-up' the drain of missed runs.
_NAME = re.compile(r"^(\*|@catch-up|[A-Za-z0-9][A-Za-z0-9._:\-]{0,199})$")
_COLUMNS = ("target", "rate_per_s", "burst", "max_in_flight", "in_flight", "throttled")


def register(sub: Any) -> None:
    parser = sub.add_parser("targets", help="per-target rate and concurrency limits")
    targets = parser.add_subparsers(dest="targets_command", required=True)
    setter = targets.add_parser(
        "set", help="create or change a target's limits ('*' = the default for all others)"
    )
    setter.add_argument("name", help="target_service: a name, a URL host or kafka:<topic>; '*'")
    setter.add_argument("--rate", type=float, help="runs released per second")
    setter.add_argument("--burst", type=int, help="runs released at once (default: 1 s of rate)")
    setter.add_argument("--max-in-flight", type=int, help="attempts released and not yet ended")
    setter.set_defaults(func=_set)
    unsetter = targets.add_parser("unset", help="remove a target's own limits")
    unsetter.add_argument("name")
    unsetter.set_defaults(func=_unset)
    listing = targets.add_parser("list", help="limits, runs in flight and runs throttled now")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise InvalidInput(
            "name",
            "use 1-200 characters from A-Z a-z 0-9 . _ : - (first: letter or digit),"
            " * or @catch-up",
        )
    return value


def _set(args: argparse.Namespace) -> int:
    name = _name(args.name)
    if args.rate is None and args.burst is None and args.max_in_flight is None:
        raise InvalidInput("limits", "give at least one of --rate, --burst, --max-in-flight")
    if args.rate is not None and not (math.isfinite(args.rate) and 0 < args.rate <= 1_000_000):
        raise InvalidInput("--rate", "must be a number above 0 and at most 1000000")
    if args.burst is not None and not 1 <= args.burst <= 1_000_000:
        raise InvalidInput("--burst", "must be a whole number from 1 to 1000000")
    if args.max_in_flight is not None and not 1 <= args.max_in_flight <= 1_000_000:
        raise InvalidInput("--max-in-flight", "must be a whole number from 1 to 1000000")
    store = cli_store()
    try:
        with store.tx() as tx:
            limit = flow.set_limits(
                tx.conn,
                name,
                rate=args.rate,
                burst=args.burst,
                max_in_flight=args.max_in_flight,
            )
    finally:
        store.close()
    print(
        f"target {name}: rate={_show(limit.rate)} burst={_show(limit.burst)} "
        f"max_in_flight={_show(limit.max_in_flight)}"
    )
    return 0


def _show(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def _unset(args: argparse.Namespace) -> int:
    name = _name(args.name)
    store = cli_store()
    try:
        with store.tx() as tx:
            removed = flow.unset_limits(tx.conn, name)
    finally:
        store.close()
    if not removed:
        raise NotFound(f"target {name} has no limits of its own")
    follows = "no limits" if name == DEFAULT_TARGET else "the default ('*')"
    print(f"target {name}: limits removed; it now follows {follows}")
    return 0


def _list(args: argparse.Namespace) -> int:
    store = cli_store()
    try:
        with store.tx() as tx:
            rows = flow.overview(tx.conn)
    finally:
        store.close()
    table = [
        {
            "target": o.target_service,
            "rate_per_s": o.limit.rate,
            "burst": o.limit.burst,
            "max_in_flight": o.limit.max_in_flight,
            "in_flight": o.in_flight,
            "throttled": o.throttled,
        }
        for o in rows
    ]
    if args.json:
        print_json(table)
    else:
        print_table(table, _COLUMNS)
    return 0
