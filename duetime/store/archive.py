"""PostgreSQL's side of the archive: day partitions, their rows, and dropping them.

Every step is its own short transaction; none runs inside a planning transaction. Dropping a
partition is ``DETACH`` + a check that the detached table still holds exactly what was archived
(row count and latest ``updated_at``) + ``DROP`` + deleting its ``run_attempts``, all in one
transaction under ``lock_timeout``: ``DETACH`` takes an exclusive lock on ``runs`` until commit,
and a DDL statement queued behind a long transaction would hold up every writer queued behind
it. A lock that cannot be had within the timeout fails the drop, which the next run retries.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from duetime.archive.model import ArchivedAttempt, ArchivedRun
from duetime.errors import ArchiveError, StoreError

from .queries import query
from .store import Store

__all__ = [
    "ARCHIVE_LOCK_KEY",
    "PartitionSummary",
    "archive_lock",
    "archive_partition_days",
    "archive_partition_drop",
    "archive_partition_runs",
    "archive_partition_summary",
    "partition_name",
]

#: The advisory lock key of the archiver (an arbitrary constant: "duetime archive").
ARCHIVE_LOCK_KEY = 0x6475_6574_6172_6368
_PARTITION = re.compile(r"runs_p(\d{4})(\d{2})(\d{2})")
_LOCK_TIMEOUT = "5s"


@dataclass(frozen=True)
class PartitionSummary:
    rows: int
    open_runs: int  # scheduled or running: not archived yet
    last_updated_at: datetime | None


def partition_name(day: date) -> str:
    """The partition of ``day``, as ``duetime_ensure_runs_partition`` names it."""
    return f"runs_p{day:%Y%m%d}"


def _bounds(day: date) -> dict[str, datetime]:
    lower = datetime.combine(day, time(), tzinfo=UTC)
    return {"lower": lower, "upper": lower + timedelta(days=1)}


@contextmanager
def archive_lock(store: Store) -> Iterator[bool]:
    """Whether this process holds the archiver's advisory lock for the block (False: another
    archiver is running). The lock lives on a connection of its own, outside any transaction."""
    try:
        conn = store.engine.connect()
        locked = bool(conn.execute(query("archive_try_lock"), {"key": ARCHIVE_LOCK_KEY}).scalar())
        conn.commit()
    except SQLAlchemyError as exc:
        raise StoreError(f"database error: taking the archive lock: {exc}") from exc
    try:
        yield locked
    finally:
        try:
            if locked:
                conn.execute(query("archive_unlock"), {"key": ARCHIVE_LOCK_KEY})
                conn.commit()
        except SQLAlchemyError:
            conn.invalidate()  # closes the session, and its advisory lock with it
        finally:
            conn.close()


def archive_partition_days(store: Store) -> list[date]:
    """The days that have a partition, oldest first."""
    with store.tx() as tx:
        names = tx.conn.execute(query("archive_partitions")).scalars().all()
    days = []
    for name in names:
        match = _PARTITION.fullmatch(str(name))
        if match:
            days.append(date(int(match[1]), int(match[2]), int(match[3])))
    return sorted(days)


def archive_partition_summary(store: Store, day: date) -> PartitionSummary:
    with store.tx() as tx:
        row = tx.conn.execute(query("archive_partition_summary"), _bounds(day)).one()
    return PartitionSummary(int(row.rows), int(row.open_runs), row.last_updated_at)


def archive_partition_runs(store: Store, day: date) -> list[ArchivedRun]:
    """Every run of ``day`` with its attempts, in (scheduled_for, job_id) order, read in one
    repeatable-read transaction so runs and attempts are one snapshot."""
    with store.tx() as tx:
        tx.conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        runs = tx.conn.execute(query("archive_runs"), _bounds(day)).all()
        attempt_rows = tx.conn.execute(query("archive_attempts"), _bounds(day)).all()
    attempts: dict[uuid.UUID, list[ArchivedAttempt]] = defaultdict(list)
    for a in attempt_rows:
        attempts[a.run_id].append(
            ArchivedAttempt(
                attempt=a.attempt,
                worker=a.worker,
                started_at=a.started_at,
                finished_at=a.finished_at,
                outcome=a.outcome,
                status_code=a.status_code,
                error=a.error,
                duration_ms=a.duration_ms,
            )
        )
    return [
        ArchivedRun(
            run_id=r.run_id,
            job_id=r.job_id,
            tenant=r.tenant,
            target_service=r.target_service,
            scheduled_for=r.scheduled_for,
            due_at=r.due_at,
            state=r.state,
            attempt=r.attempt,
            max_attempts=r.max_attempts,
            worker=r.worker,
            progress=r.progress,
            last_error=r.last_error,
            publish_count=r.publish_count,
            throttled_ms=r.throttled_ms,
            published_at=r.published_at,
            released_at=r.released_at,
            started_at=r.started_at,
            finished_at=r.finished_at,
            dead_published_at=r.dead_published_at,
            created_at=r.created_at,
            updated_at=r.updated_at,
            attempts=tuple(attempts.get(r.run_id, ())),
        )
        for r in runs
    ]


def archive_partition_drop(store: Store, day: date, expected: PartitionSummary) -> None:
    """Detach and drop ``day``'s partition and delete its attempts, in one short transaction,
    only if it still holds what was archived; ``ArchiveError`` (nothing changed) otherwise."""
    name = partition_name(day)
    if not _PARTITION.fullmatch(name):  # the only identifier ever formatted into SQL here
        raise ValueError(f"not a runs partition name: {name!r}")
    with store.tx() as tx:
        tx.conn.execute(text(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'"))
        tx.conn.execute(text(f'ALTER TABLE runs DETACH PARTITION "{name}"'))
        row = tx.conn.execute(
            text(f'SELECT count(*) AS rows, max(updated_at) AS last FROM "{name}"')
        ).one()
        if int(row.rows) != expected.rows or row.last != expected.last_updated_at:
            raise ArchiveError(
                f"partition {name} changed while it was archived ({row.rows} rows now, "
                f"{expected.rows} archived); it stays, the next run archives it again"
            )
        tx.conn.execute(text(f'DROP TABLE "{name}"'))
        tx.conn.execute(query("archive_delete_attempts"), _bounds(day))
