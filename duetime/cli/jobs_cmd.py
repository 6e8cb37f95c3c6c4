"""``duetime jobs apply|list|pause|resume|delete``: manage job definitions."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from duetime.errors import InvalidInput, NotFound, QuotaExceeded
from duetime.jobdef import load_job_file
from duetime.store.fanout import merge_by_job_id
from duetime.store.jobs import jobs_apply_clusters, jobs_set_paused

from ._output import print_json, print_table
from ._store import cli_clusters

_LIST_COLUMNS = (
    "job_id",
    "tenant",
    "schedule_kind",
    "schedule_expr",
    "time_zone",
    "target_service",
    "paused",
    "next_run_at",
    "version",
)


def register(sub: Any) -> None:
    parser = sub.add_parser("jobs", help="apply and list job definitions")
    jobs = parser.add_subparsers(dest="jobs_command", required=True)
    apply = jobs.add_parser("apply", help="create or update the jobs of a JSON or YAML file")
    apply.add_argument("file", type=Path)
    apply.add_argument("--json", action="store_true", help="print the result as JSON")
    apply.set_defaults(func=_apply)
    listing = jobs.add_parser("list", help="list jobs")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=int, default=1000)
    listing.set_defaults(func=_list)
    for name, text in (
        ("pause", "stop planning a job (runs already planned still run)"),
        ("resume", "plan a paused job again, from its next occurrence after now"),
        ("delete", "remove a job; its run history stays"),
    ):
        command = jobs.add_parser(name, help=text)
        command.add_argument("job_id")
        command.set_defaults(func=_change, action=name)


def _apply(args: argparse.Namespace) -> int:
    # Validate the whole file before touching the database: a bad job refuses the file.
    jobs = load_job_file(args.file)
    clusters = cli_clusters()
    try:
        # Each job to its shard's cluster, one transaction per cluster (docs/clusters.md).
        writes = jobs_apply_clusters(clusters, jobs)
    except QuotaExceeded as exc:
        raise InvalidInput(
            exc.field,
            f"job file refused: tenant {exc.tenant} may have at most {exc.max_jobs} jobs; "
            f"it has {exc.jobs} and this file adds {exc.adds}",
        ) from exc
    finally:
        clusters.close()
    rows = [{"job_id": w.job_id, "action": w.action, "version": w.version} for w in writes]
    if args.json:
        print_json(rows)
    else:
        for row in rows:
            print(f"{row['job_id']}: {row['action']} (version {row['version']})")
    return 0


def _change(args: argparse.Namespace) -> int:
    clusters = cli_clusters()
    try:
        with clusters.for_job(args.job_id).tx() as tx:
            if args.action == "delete":
                if not tx.jobs_remove(args.job_id):
                    raise NotFound(f"no job {args.job_id!r}")
                outcome = "deleted"
            else:
                outcome = jobs_set_paused(tx, args.job_id, paused=args.action == "pause")
    finally:
        clusters.close()
    print(f"{args.job_id}: {outcome}")
    return 0


def _list(args: argparse.Namespace) -> int:
    clusters = cli_clusters()
    try:
        parts = [store.jobs_list(args.limit) for store in clusters]
        with clusters.home.tx() as tx:
            rows = [dict(r._mapping) for r in merge_by_job_id(tx.conn, parts, args.limit)]
    finally:
        clusters.close()
    if args.json:
        print_json(rows)
    else:
        print_table(rows, _LIST_COLUMNS)
    return 0
