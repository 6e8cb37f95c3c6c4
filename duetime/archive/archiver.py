"""The archiver: day partitions of ``runs`` past the retention go to object storage, then away.

For each partition whose whole day ended more than ``retention`` ago (or before ``--before``),
oldest first:

1. its runs and their attempts are read in one snapshot; a partition that still holds a
   ``scheduled`` or ``running`` run is left for a later run (``held``);
2. they are written as one Avro object container file, named by its SHA-256, and a JSON
   manifest beside it (day, rows, checksum, the job ids it holds);
3. both are read back: the data object's SHA-256 must equal the one computed before the upload,
   and it must decode to as many runs as were read; the manifest must parse to what was written;
4. the partition is detached and dropped, and its attempts deleted, in one short transaction
   that first checks the detached table still holds what was archived.

A failure at any step leaves the partition in place; the next run starts it over, and since
the same rows encode to the same bytes, it writes the same keys again. One archiver runs at a
time per database (an advisory lock); a second one finds the lock taken and does nothing, so
the reaper's hourly run and an operator's ``duetime archive`` can overlap safely.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from duetime.errors import ArchiveError, ConfigError, StoreError
from duetime.logs import event
from duetime.store import Store
from duetime.store.archive import (
    PartitionSummary,
    archive_lock,
    archive_partition_days,
    archive_partition_drop,
    archive_partition_runs,
    archive_partition_summary,
    partition_name,
)

from .codec import SCHEMA_FINGERPRINT, decode_runs, encode_runs, sha256_hex
from .keys import data_key, manifest_key
from .ports import ObjectStore

__all__ = [
    "ArchiveConfig",
    "ArchiveReport",
    "Archiver",
    "PartitionOutcome",
    "default_before",
    "retention_from_env",
]

_MANIFEST_FORMAT = 1
_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchiveConfig:
    #: A partition is archived once its whole day ended this long ago.
    retention: timedelta = timedelta(days=7)
    #: The key prefix in the bucket (checked by ``duetime.archive.keys.check_prefix``).
    prefix: str = ""

    def __post_init__(self) -> None:
        if self.retention < timedelta(days=1):
            raise ConfigError("archive retention must be at least 1 day")


@dataclass(frozen=True)
class PartitionOutcome:
    day: date
    #: ``archived``, ``would_archive`` (dry run), ``held`` (open runs) or ``failed``.
    action: str
    rows: int
    key: str | None = None
    reason: str | None = None


@dataclass
class ArchiveReport:
    before: date
    dry_run: bool
    #: False when another archiver held the lock: nothing was looked at.
    ran: bool = True
    partitions: list[PartitionOutcome] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(1 for p in self.partitions if p.action == action)

    @property
    def failed(self) -> bool:
        return self.count("failed") > 0


def default_before(now: datetime, retention: timedelta) -> date:
    """The first day kept: every partition of a day before it ended ``retention`` ago."""
    return (now.astimezone(UTC) - retention).date()


def retention_from_env(env: Mapping[str, str] | None = None) -> timedelta:
    """``DUETIME_ARCHIVE_RETENTION_DAYS`` (default 7), the one reading of it."""
    raw = (os.environ if env is None else env).get("DUETIME_ARCHIVE_RETENTION_DAYS", "7")
    try:
        days = int(raw)
    except ValueError:
        days = 0
    if days < 1 or days > 36600:
        raise ConfigError(
            f"DUETIME_ARCHIVE_RETENTION_DAYS must be a whole number of days, 1 or more, not {raw!r}"
        )
    return timedelta(days=days)


class Archiver:
    """Archives and drops old partitions; ``run_once`` is what the CLI and the reaper call."""

    def __init__(
        self,
        store: Store,
        objects: ObjectStore,
        config: ArchiveConfig | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.objects = objects
        self.config = config or ArchiveConfig()
        self._clock = clock

    def run_once(
        self, now: datetime, *, before: date | None = None, dry_run: bool = False
    ) -> ArchiveReport:
        """Archive every partition of a day before ``before`` (default: past the retention).

        ``before`` may not be later than yesterday: the planner writes into today's partition
        and catches up into yesterday's.
        """
        latest = now.astimezone(UTC).date() - timedelta(days=1)
        cutoff = before or default_before(now, self.config.retention)
        if cutoff > latest:
            raise ConfigError(
                f"--before {cutoff.isoformat()}: partitions of today and yesterday are never "
                f"archived; the latest allowed is {latest.isoformat()}"
            )
        report = ArchiveReport(before=cutoff, dry_run=dry_run)
        with archive_lock(self.store) as locked:
            if not locked:
                report.ran = False
                event(_logger, "archive.busy", before=cutoff)
                return report
            for day in archive_partition_days(self.store):
                if day >= cutoff:
                    break
                report.partitions.append(self._partition(day, dry_run))
        event(
            _logger,
            "archive.done",
            before=cutoff,
            dry_run=dry_run or None,
            archived=report.count("archived"),
            would_archive=report.count("would_archive") if dry_run else None,
            held=report.count("held"),
            failed=report.count("failed"),
        )
        return report

    def _partition(self, day: date, dry_run: bool) -> PartitionOutcome:
        try:
            summary = archive_partition_summary(self.store, day)
            if summary.open_runs:
                event(
                    _logger,
                    "archive.partition_held",
                    logging.WARNING,
                    partition=partition_name(day),
                    open_runs=summary.open_runs,
                )
                return PartitionOutcome(
                    day, "held", summary.rows, reason=f"{summary.open_runs} runs not ended"
                )
            if dry_run:
                return PartitionOutcome(day, "would_archive", summary.rows)
            return self._archive(day)
        except (ArchiveError, StoreError) as exc:
            event(
                _logger,
                "archive.partition_failed",
                logging.ERROR,
                partition=partition_name(day),
                error=str(exc),
            )
            return PartitionOutcome(day, "failed", 0, reason=str(exc))

    def _archive(self, day: date) -> PartitionOutcome:
        runs = archive_partition_runs(self.store, day)
        open_runs = sum(1 for r in runs if r.state in ("scheduled", "running"))
        if open_runs:
            return PartitionOutcome(day, "held", len(runs), reason=f"{open_runs} runs not ended")
        data = encode_runs(day, runs)
        digest = sha256_hex(data)
        key = data_key(self.config.prefix, day, digest)
        manifest = {
            "format": _MANIFEST_FORMAT,
            "day": day.isoformat(),
            "partition": partition_name(day),
            "rows": len(runs),
            "attempts": sum(len(r.attempts) for r in runs),
            "sha256": digest,
            "bytes": len(data),
            "schema": "run_archive.avsc",
            "schema_fingerprint": SCHEMA_FINGERPRINT,
            "object": key.rsplit("/", 1)[-1],
            "job_ids": sorted({r.job_id for r in runs}),
            "archived_at": self._clock().astimezone(UTC).isoformat(),
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True, ensure_ascii=True).encode()
        m_key = manifest_key(self.config.prefix, day, digest)
        self.objects.put(key, data)
        self.objects.put(m_key, manifest_bytes)
        self._verify(key, m_key, digest, len(runs))
        expected = PartitionSummary(
            rows=len(runs),
            open_runs=0,
            last_updated_at=max((r.updated_at for r in runs), default=None),
        )
        archive_partition_drop(self.store, day, expected)
        event(
            _logger,
            "archive.partition_archived",
            partition=partition_name(day),
            rows=len(runs),
            key=key,
            bytes=len(data),
        )
        return PartitionOutcome(day, "archived", len(runs), key=key)

    def _verify(self, key: str, m_key: str, digest: str, rows: int) -> None:
        back = self.objects.get(key)
        got = sha256_hex(back)
        if got != digest:
            raise ArchiveError(
                f"archive object {key} read back with SHA-256 {got}, not {digest}: "
                "the partition stays"
            )
        decoded = decode_runs(back)
        if len(decoded) != rows:
            raise ArchiveError(
                f"archive object {key} holds {len(decoded)} runs, not {rows}: the partition stays"
            )
        try:
            manifest = json.loads(self.objects.get(m_key))
        except ValueError as exc:
            raise ArchiveError(f"archive manifest {m_key} does not parse: {exc}") from exc
        if manifest.get("sha256") != digest or manifest.get("rows") != rows:
            raise ArchiveError(f"archive manifest {m_key} read back differs: the partition stays")
