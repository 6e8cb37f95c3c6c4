"""The runs of a time range, read back from the database to re-emit their events.

``duetime reemit`` uses it when a topic's retention has passed: PostgreSQL keeps every run, the
broker does not. Pages are read by keyset (scheduled_for, run_id), so a large range costs one
index-ordered statement per page and never an offset scan.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .queries import query
from .rows import OutboxRun, retry_from_row, target_from_json
from .store import Store

__all__ = ["StoredRun", "runs_reemit"]

_BEFORE_EVERYTHING = (datetime(1970, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


@dataclass(frozen=True)
class StoredRun:
    """A run as stored: what its run event is built from (``run.target`` is None when its job
    has been deleted since), its state, and how it ended."""

    run: OutboxRun
    state: str
    last_error: str | None
    finished_at: datetime | None


def runs_reemit(
    store: Store,
    since: datetime,
    until: datetime,
    *,
    states: Sequence[str],
    job_id: str | None = None,
    page_size: int = 1000,
) -> Iterator[list[StoredRun]]:
    """Pages of the runs scheduled in ``[since, until)``, oldest first, one transaction each."""
    after = _BEFORE_EVERYTHING
    while True:
        with store.tx() as tx:
            rows = tx.conn.execute(
                query("runs_reemit_page"),
                {
                    "since": since,
                    "until": until,
                    "job_id": job_id,
                    "states": list(states),
                    "after_scheduled_for": after[0],
                    "after_run_id": after[1],
                    "limit": page_size,
                },
            ).all()
        if not rows:
            return
        yield [_stored(r) for r in rows]
        if len(rows) < page_size:
            return
        after = (rows[-1].scheduled_for, rows[-1].run_id)


def _stored(row: Any) -> StoredRun:
    return StoredRun(
        run=OutboxRun(
            run_id=row.run_id,
            job_id=row.job_id,
            tenant=row.tenant,
            target_service=row.target_service,
            scheduled_for=row.scheduled_for,
            due_at=row.due_at,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            target=None if row.job_missing else target_from_json(row.target),
            lease=timedelta(milliseconds=row.lease_ms or 60_000),
            heartbeat_interval=timedelta(milliseconds=row.heartbeat_ms or 20_000),
            retry=retry_from_row(row, row.max_attempts),
        ),
        state=row.state,
        last_error=row.last_error,
        finished_at=row.finished_at,
    )
