"""``duetime archive``: old day partitions of runs to object storage, verified, then dropped;
and ``duetime runs list --job ID --archived``, which reads them back (docs/runs.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from duetime.archive.archiver import ArchiveConfig, Archiver, retention_from_env
from duetime.archive.finder import find_archived_runs
from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.errors import ConfigError, InvalidInput

from ._output import iso, print_json, print_table
from ._store import cli_settings, cli_store
from .replay_cmd import parse_instant

__all__ = ["list_archived", "register"]


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "archive",
        help="archive runs partitions past the retention to object storage, then drop them",
    )
    parser.add_argument(
        "--before",
        help="archive the partitions of days before this date (YYYY-MM-DD; default: today "
        "minus DUETIME_ARCHIVE_RETENTION_DAYS, 7); at the latest yesterday",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be archived, change nothing"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=_archive)


def _objects() -> tuple[S3ObjectStore, str]:
    settings = S3Settings.require(data_dir=cli_settings().data_dir)
    return S3ObjectStore(settings), settings.prefix


def _archive(args: argparse.Namespace) -> int:
    before: date | None = None
    if args.before:
        try:
            before = date.fromisoformat(args.before)
        except ValueError as exc:
            raise InvalidInput("--before", f"not a date (YYYY-MM-DD): {args.before!r}") from exc
    store = cli_store()
    try:
        objects, prefix = _objects()
        archiver = Archiver(
            store, objects, ArchiveConfig(retention=retention_from_env(), prefix=prefix)
        )
        try:
            report = archiver.run_once(datetime.now(UTC), before=before, dry_run=args.dry_run)
        except ConfigError as exc:
            if before is not None:
                raise InvalidInput("--before", str(exc)) from exc
            raise
    finally:
        store.close()
    rows = [
        {
            "day": p.day.isoformat(),
            "action": p.action,
            "rows": p.rows,
            "key": p.key,
            "reason": p.reason,
        }
        for p in report.partitions
    ]
    if args.json:
        print_json(rows)
    elif not report.ran:
        print("another archiver is running on this database; nothing done")
    else:
        verb = "would archive" if args.dry_run else "archived"
        print_table(rows, ("day", "action", "rows", "key", "reason"))
        print(
            f"{verb} {report.count('would_archive' if args.dry_run else 'archived')} "
            f"partitions before {report.before.isoformat()}; held {report.count('held')}, "
            f"failed {report.count('failed')}"
        )
    return 1 if report.failed else 0


def list_archived(args: argparse.Namespace, columns: Sequence[str]) -> int:
    """``runs list --job ID --archived [--since] [--until] [--limit] [--json]``: the same
    ``columns`` as the database's runs."""
    if not args.job:
        raise InvalidInput("--job", "--archived lists one job's archived runs: name it")
    if args.limit < 1:
        raise InvalidInput("--limit", "must be at least 1")
    since = parse_instant("--since", args.since) if args.since else None
    until = parse_instant("--until", args.until) if args.until else None
    objects, prefix = _objects()
    runs = [
        r
        for r in find_archived_runs(
            objects,
            prefix,
            args.job,
            since=None if since is None else since.astimezone(UTC).date(),
            until=None if until is None else until.astimezone(UTC).date() + timedelta(days=1),
        )
        if (since is None or r.scheduled_for >= since)
        and (until is None or r.scheduled_for < until)
    ][: args.limit]
    rows = [{c: getattr(r, c) for c in columns} for r in runs]
    if args.json:
        print_json(
            [
                {
                    **row,
                    "last_error": r.last_error,
                    "attempts": [
                        {
                            "attempt": a.attempt,
                            "worker": a.worker,
                            "outcome": a.outcome,
                            "started_at": iso(a.started_at),
                            "finished_at": iso(a.finished_at),
                            "error": a.error,
                        }
                        for a in r.attempts
                    ],
                }
                for row, r in zip(rows, runs, strict=True)
            ]
        )
    else:
        print_table(rows, columns)
    return 0
