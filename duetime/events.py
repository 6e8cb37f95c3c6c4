"""Event records that travel on the result, heartbeat, dead and rejected topics."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

__all__ = ["JobRejected", "JobTombstone", "RunDead", "RunHeartbeat", "RunResult"]


@dataclass(frozen=True)
class JobTombstone:
    """A ``deleted=true`` job-definition record: remove the job (if ``version`` is newer)."""

    job_id: str
    version: int


@dataclass(frozen=True)
class RunHeartbeat:
    run_id: uuid.UUID
    scheduled_for: datetime
    attempt: int
    worker: str
    lease_expires_at: datetime
    sent_at: datetime
    progress: str | None = None


@dataclass(frozen=True)
class RunResult:
    run_id: uuid.UUID
    job_id: str
    tenant: str
    target_service: str
    scheduled_for: datetime
    attempt: int
    worker: str
    outcome: str  # succeeded | failed | fenced | handed_back (a stopping worker)
    state: str  # the run's state after this attempt
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    status_code: int | None = None


@dataclass(frozen=True)
class RunDead:
    run_id: uuid.UUID
    job_id: str
    tenant: str
    scheduled_for: datetime
    attempts: int
    dead_at: datetime
    last_error: str | None = None


@dataclass(frozen=True)
class JobRejected:
    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None
    value: bytes | None
    field: str
    reason: str
    rejected_at: datetime
