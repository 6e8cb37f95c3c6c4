"""``duetime archive``: old day partitions of runs to object storage, verified, then dropped;
and ``duetime runs list --job ID --archived``, which reads them back (docs/runs.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from duetime.archive.archiver import ArchiveConfig, Archiver, ArchiveReport, retention_from_env
from duetime.archive.cluster_keys import cluster_prefix, cluster_prefixes
from duetime.archive.finder import find_archived_runs_under
from duetime.archive.model import ArchivedRun
from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.config import Settings
from duetime.errors import ConfigError, DuetimeError, InvalidInput
from duetime.store.clusters import ClusterStores

from ._output import iso, print_json, print_table
from ._store import NoStack, check_cluster, cli_clusters, cli_settings
from .replay_cmd import parse_instant

__all__ = ["archived_runs_of_days", "list_archived", "register"]


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


def _objects(settings: Settings) -> tuple[S3ObjectStore, str]:
    s3 = S3Settings.require(data_dir=settings.data_dir)
    return S3ObjectStore(s3), s3.prefix


@dataclass(frozen=True)
class _ClusterArchive:
    """One cluster's archive run: its report, or the error that stopped it."""

    cluster: int
    report: ArchiveReport | None = None
    error: DuetimeError | None = None


def _archive(args: argparse.Namespace) -> int:
    before: date | None = None
    if args.before:
        try:
            before = date.fromisoformat(args.before)
        except ValueError as exc:
            raise InvalidInput("--before", f"not a date (YYYY-MM-DD): {args.before!r}") from exc
    settings = cli_settings()
    clusters = cli_clusters(settings, check=False)
    try:
        results = _archive_clusters(args, settings, clusters, before)
    finally:
        clusters.close()
    if len(results) == 1 and results[0].report is not None:
        return _print_one(args, results[0].report)
    return _print_several(args, results)


def _archive_clusters(
    args: argparse.Namespace, settings: Settings, clusters: ClusterStores, before: date | None
) -> list[_ClusterArchive]:
    """Each cluster's partitions archived by an archiver of its own (its own advisory lock),
    under the cluster's key prefix, one cluster after the other, as the reaper does. With one
    cluster its error is the command's, as it always was; with several, a cluster that does not
    answer or fails is reported and the others are still archived."""
    several = len(clusters) > 1
    unreachable: dict[int, DuetimeError] = {}
    for index in range(len(clusters)):
        try:
            check_cluster(clusters, index, settings)
        except NoStack as exc:
            if not several:
                raise
            unreachable[index] = exc
    objects, prefix = _objects(settings)
    retention = retention_from_env()
    now = datetime.now(UTC)
    results: list[_ClusterArchive] = []
    for index, store in enumerate(clusters):
        if index in unreachable:
            results.append(_ClusterArchive(index, error=unreachable[index]))
            continue
        config = ArchiveConfig(retention=retention, prefix=cluster_prefix(prefix, index))
        try:
            report = Archiver(store, objects, config).run_once(
                now, before=before, dry_run=args.dry_run
            )
        except ConfigError as exc:
            if before is not None:
                raise InvalidInput("--before", str(exc)) from exc
            raise
        except DuetimeError as exc:
            if not several:
                raise
            results.append(_ClusterArchive(index, error=exc))
            continue
        results.append(_ClusterArchive(index, report=report))
    return results


_COLUMNS = ("day", "action", "rows", "key", "reason")


def _partition_rows(report: ArchiveReport) -> list[dict[str, Any]]:
    return [
        {
            "day": p.day.isoformat(),
            "action": p.action,
            "rows": p.rows,
            "key": p.key,
            "reason": p.reason,
        }
        for p in report.partitions
    ]


def _done(report: ArchiveReport, dry_run: bool) -> str:
    """What one archiver did, in one line."""
    if not report.ran:
        return "another archiver is running on this database; nothing done"
    verb = "would archive" if dry_run else "archived"
    return (
        f"{verb} {report.count('would_archive' if dry_run else 'archived')} "
        f"partitions before {report.before.isoformat()}; held {report.count('held')}, "
        f"failed {report.count('failed')}"
    )


def _print_one(args: argparse.Namespace, report: ArchiveReport) -> int:
    """One cluster: the output it always had."""
    rows = _partition_rows(report)
    if args.json:
        print_json(rows)
    elif not report.ran:
        print(_done(report, args.dry_run))
    else:
        print_table(rows, _COLUMNS)
        print(_done(report, args.dry_run))
    return 1 if report.failed else 0


def _print_several(args: argparse.Namespace, results: Sequence[_ClusterArchive]) -> int:
    """Several clusters: every cluster's partitions with its index in the map (as in its key
    prefix, ``cluster-<N>/``), a cluster that failed as one ``failed`` row without a day, and
    one line per cluster; exit code 1 if any cluster or partition failed."""
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    failed = False
    for result in results:
        if result.report is None:
            reason = " ".join(str(result.error).split())
            rows.append(
                {
                    "cluster": result.cluster,
                    "day": None,
                    "action": "failed",
                    "rows": 0,
                    "key": None,
                    "reason": reason,
                }
            )
            lines.append(f"cluster {result.cluster}: failed: {reason}")
            failed = True
            continue
        rows.extend({"cluster": result.cluster, **row} for row in _partition_rows(result.report))
        lines.append(f"cluster {result.cluster}: {_done(result.report, args.dry_run)}")
        failed = failed or result.report.failed
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ("cluster", *_COLUMNS))
        for line in lines:
            print(line)
    return 1 if failed else 0


def _job_archive(
    settings: Settings, s3: S3Settings, job_id: str, *, since: date | None, until: date | None
) -> list[ArchivedRun]:
    """The runs of ``job_id`` archived on days in [since, until), under every cluster's prefix
    (a run archived before its shard moved is under another cluster's), newest first."""
    clusters = 1 if settings.shard_map is None else settings.shard_map.size
    return find_archived_runs_under(
        S3ObjectStore(s3),
        cluster_prefixes(s3.prefix, clusters),
        job_id,
        since=since,
        until=until,
    )


def archived_runs_of_days(
    settings: Settings, job_id: str, days: tuple[date, date]
) -> list[ArchivedRun]:
    """The runs of ``job_id`` archived on the days [days[0], days[1]); none when no object
    storage is configured (then nothing was archived by this system)."""
    s3 = S3Settings.load(data_dir=settings.data_dir)
    if s3 is None:
        return []
    return _job_archive(settings, s3, job_id, since=days[0], until=days[1])


def list_archived(args: argparse.Namespace, columns: Sequence[str]) -> int:
    """``runs list --job ID --archived [--since] [--until] [--limit] [--json]``: the same
    ``columns`` as the database's runs."""
    if not args.job:
        raise InvalidInput("--job", "--archived lists one job's archived runs: name it")
    if args.limit < 1:
        raise InvalidInput("--limit", "must be at least 1")
    since = parse_instant("--since", args.since) if args.since else None
    until = parse_instant("--until", args.until) if args.until else None
    settings = cli_settings()
    runs = [
        r
        for r in _job_archive(
            settings,
            S3Settings.require(data_dir=settings.data_dir),
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
