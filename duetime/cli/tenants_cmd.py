"""``duetime tenants set|list``: fairness weights and job quotas.

The dispatchers re-read the weights every few seconds (no restart); a quota holds for every job
write that starts after ``set`` returns, on job files and on the jobs topic alike.
docs/flow-control.md ("Tenants") has the semantics.
"""

from __future__ import annotations

import argparse
from typing import Any

from duetime.errors import InvalidInput
from duetime.jobdef import TENANT_PATTERN
from duetime.store import tenants

from ._output import print_json, print_table
from ._store import cli_store

_COLUMNS = ("tenant", "weight", "max_jobs", "jobs")
_MAX_WEIGHT = 1000  # tenants.fairness_weight CHECK
_MAX_JOBS = 2**31 - 1  # tenants.max_jobs is an integer


def register(sub: Any) -> None:
    parser = sub.add_parser("tenants", help="tenants' fairness weights and job quotas")
    commands = parser.add_subparsers(dest="tenants_command", required=True)
    setter = commands.add_parser(
        "set", help="create or change a tenant (only the options given change)"
    )
    setter.add_argument("name", help="the tenant: 1-63 characters of a-z 0-9 _ -")
    setter.add_argument(
        "--weight",
        metavar="W",
        help=f"runs it sends per turn at a throttled target, 1-{_MAX_WEIGHT} (default 1)",
    )
    setter.add_argument(
        "--max-jobs",
        metavar="N|none",
        help="the most jobs it may have (default: no quota); 'none' removes the quota",
    )
    setter.set_defaults(func=_set)
    listing = commands.add_parser("list", help="weights, quotas and jobs now")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)


def _name(value: str) -> str:
    if not TENANT_PATTERN.match(value):
        raise InvalidInput("name", "use 1-63 characters from a-z 0-9 _ - (first: letter or digit)")
    return value


def _whole(option: str, value: str, high: int, extra: str = "") -> int:
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= high):
        raise InvalidInput(option, f"must be a whole number from 1 to {high}{extra}, not {value!r}")
    return int(value)


def _set(args: argparse.Namespace) -> int:
    name = _name(args.name)
    if args.weight is None and args.max_jobs is None:
        raise InvalidInput("options", "give at least one of --weight, --max-jobs")
    weight = None if args.weight is None else _whole("--weight", args.weight, _MAX_WEIGHT)
    remove = args.max_jobs == "none"
    max_jobs = None
    if args.max_jobs is not None and not remove:
        max_jobs = _whole("--max-jobs", args.max_jobs, _MAX_JOBS, ", or none to remove the quota")
    store = cli_store()
    try:
        with store.tx() as tx:
            row = tenants.set_tenant(
                tx.conn, name, weight=weight, max_jobs=max_jobs, remove_max_jobs=remove
            )
    finally:
        store.close()
    quota = "none" if row.max_jobs is None else str(row.max_jobs)
    print(f"tenant {name}: weight={row.weight} max_jobs={quota} jobs={row.jobs}")
    if row.max_jobs is not None and row.jobs > row.max_jobs:
        print(
            f"tenant {name} has {row.jobs} jobs, more than max_jobs {row.max_jobs}: "
            "it can change and delete its jobs, and add none until it is below"
        )
    return 0


def _list(args: argparse.Namespace) -> int:
    store = cli_store()
    try:
        with store.tx() as tx:
            rows = tenants.overview(tx.conn)
    finally:
        store.close()
    table = [
        {"tenant": r.tenant, "weight": r.weight, "max_jobs": r.max_jobs, "jobs": r.jobs}
        for r in rows
    ]
    if args.json:
        print_json(table)
    else:
        print_table(table, _COLUMNS)
    return 0
