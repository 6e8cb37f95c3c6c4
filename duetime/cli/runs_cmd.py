"""``duetime runs list``: run history, newest first; with ``--all-occurrences``, the occurrence
ledger of one job (every occurrence and what became of it, :mod:`duetime.ledger`), archived runs
included for days the archive took out of the database."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from duetime.errors import InvalidInput, NotFound
from duetime.ledger import archivable_days, occurrence_ledger, with_archived_runs
from duetime.schedule import ScheduleCache
from duetime.store.fanout import merge_runs_list
from duetime.store.rows import spec_from_row

from ._output import print_json, print_table
from ._store import cli_clusters, cli_settings
from .archive_cmd import archived_runs_of_days, list_archived
from .replay_cmd import parse_instant

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
    listing.add_argument(
        "--all-occurrences",
        action="store_true",
        help="with --job: every occurrence of the job's schedule in --since..--until, each with "
        "its run or the reason it has none (skipped by catch-up, a pause, overlap or a DST gap; "
        "missed; upcoming)",
    )
    listing.add_argument(
        "--archived",
        action="store_true",
        help="with --job: the job's runs archived to object storage (duetime archive), read "
        "back from the archive; --since/--until narrow the days read",
    )
    listing.add_argument("--since", help="--all-occurrences: from (ISO-8601; default 24 h ago)")
    listing.add_argument("--until", help="--all-occurrences: until (ISO-8601; default in 1 h)")
    listing.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    if args.all_occurrences:
        return _occurrences(args)
    if args.archived:
        return list_archived(args, _COLUMNS)
    clusters = cli_clusters()
    try:
        # One job's runs are in its cluster; all runs: every cluster's newest, merged.
        stores = [clusters.for_job(args.job)] if args.job else list(clusters)
        parts = [store.runs_list(args.job, args.limit) for store in stores]
        with clusters.home.tx() as tx:
            rows = [dict(r._mapping) for r in merge_runs_list(tx.conn, parts, args.limit)]
    finally:
        clusters.close()
    if args.json:
        extra = ("released_at", "throttled_ms", "last_error")
        print_json([{**{c: r[c] for c in _COLUMNS}, **{c: r[c] for c in extra}} for r in rows])
    else:
        print_table(rows, _COLUMNS)
    return 0


_LEDGER_COLUMNS = ("scheduled_for", "status", "reason", "run_id", "attempt")


def _occurrences(args: argparse.Namespace) -> int:
    if not args.job:
        raise InvalidInput("--job", "--all-occurrences lists one job's occurrences: name it")
    if args.limit < 1:
        raise InvalidInput("--limit", "must be at least 1")
    settings = cli_settings()
    clusters = cli_clusters(settings)
    store = clusters.for_job(args.job)
    try:
        with store.tx() as tx:
            now = tx.db_now()
        since = parse_instant("--since", args.since) if args.since else now - timedelta(days=1)
        until = parse_instant("--until", args.until) if args.until else now + timedelta(hours=1)
        if until <= since:
            raise InvalidInput("--until", "must be later than --since")
        ledger = store.ledger(args.job, since, until)
    finally:
        clusters.close()
    if ledger is None:
        raise NotFound(f"no job {args.job!r}")
    runs = ledger.runs
    days = archivable_days(since, until, now)
    if days is not None:
        # Days past the retention may be in object storage, not in the database: without their
        # archived runs every occurrence of such a day would read "missed".
        archived = archived_runs_of_days(settings, args.job, days)
        runs = with_archived_runs(runs, archived, since=since, until=until)
    job = ledger.job
    lines = occurrence_ledger(
        ScheduleCache().get(spec_from_row(job)),
        since=since,
        until=until,
        now=now,
        created_at=job.created_at,
        next_run_at=job.next_run_at,
        paused=job.paused,
        runs=runs,
        gaps=ledger.gaps,
        limit=args.limit,
    )
    rows = [{c: getattr(line, c) for c in _LEDGER_COLUMNS} for line in lines]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, _LEDGER_COLUMNS)
    return 0
