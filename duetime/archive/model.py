"""Archived runs as the domain sees them: frozen dataclasses, no codec, no driver."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

__all__ = ["ArchivedAttempt", "ArchivedRun"]


@dataclass(frozen=True)
class ArchivedAttempt:
    attempt: int
    worker: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    status_code: int | None
    error: str | None
    duration_ms: int | None


@dataclass(frozen=True)
class ArchivedRun:
    """A row of ``runs`` as archived (lease tokens and the outbox's working columns left out)."""

    run_id: uuid.UUID
    job_id: str
    tenant: str
    target_service: str
    scheduled_for: datetime
    due_at: datetime
    state: str
    attempt: int
    max_attempts: int
    worker: str | None
    progress: str | None
    last_error: str | None
    publish_count: int
    throttled_ms: int | None
    published_at: datetime | None
    released_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    dead_published_at: datetime | None
    created_at: datetime
    updated_at: datetime
    attempts: tuple[ArchivedAttempt, ...]
