"""The shapes of the API's answers (pydantic, for the OpenAPI document) and the job schema.

A job's request body is *not* parsed by pydantic: it goes through ``duetime.jobdef.parse_job``,
the validation of job files and of the jobs topic, so the API refuses exactly what they refuse
with the same messages. ``JOB_SCHEMA`` only describes it in the OpenAPI document.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, Field

__all__ = [
    "JOB_SCHEMA",
    "AttemptOut",
    "BackfillIn",
    "BackfillOut",
    "ForecastOut",
    "JobOut",
    "JobPage",
    "LagOut",
    "LatenessOut",
    "OutboxOut",
    "RunDetailOut",
    "RunOut",
    "RunPage",
    "ShardOut",
    "StateChangeOut",
    "TriggerOut",
    "UtcInstant",
    "WhoAmIOut",
]

_SECONDS = {"type": "number"}
JOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A job definition, as in job files (README, 'Job definitions').",
    "required": ["id", "schedule", "target"],
    "properties": {
        "id": {"type": "string", "maxLength": 200},
        "tenant": {"type": "string", "maxLength": 63},
        "schedule": {
            "type": "object",
            "properties": {
                "cron": {"type": "string"},
                "interval": {"type": "string"},
                "at": {"type": "string"},
                "time_zone": {"type": "string"},
                "dst_gap": {"type": "string", "enum": ["shift", "skip"]},
                "dst_overlap": {"type": "string", "enum": ["once", "twice"]},
                "start_at": {"type": "string"},
            },
        },
        "window_seconds": _SECONDS,
        "catch_up": {"type": "string", "enum": ["once", "all", "skip"]},
        "max_catch_up": {"type": "integer"},
        "overlap": {"type": "string", "enum": ["allow", "skip", "buffer_one"]},
        "target": {
            "type": "object",
            "properties": {
                "http": {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string"},
                        "method": {"type": "string"},
                        "headers": {"type": "object"},
                        "body": {},
                        "timeout_seconds": _SECONDS,
                    },
                },
                "kafka": {
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string"},
                        "key": {"type": "string"},
                        "value": {},
                    },
                },
            },
        },
        "target_service": {"type": "string"},
        "retry": {
            "type": "object",
            "properties": {
                "max_attempts": {"type": "integer"},
                "initial_interval_seconds": _SECONDS,
                "multiplier": _SECONDS,
                "max_interval_seconds": _SECONDS,
                "jitter": _SECONDS,
            },
        },
        "lease_seconds": _SECONDS,
        "heartbeat_seconds": _SECONDS,
        "paused": {"type": "boolean"},
        "version": {"type": "integer"},
    },
}


class JobOut(BaseModel):
    id: str
    tenant: str
    version: int
    paused: bool
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    created_at: datetime
    updated_at: datetime
    definition: dict[str, Any] = Field(
        description="the job in the job-file format; PUT it back to replace the job"
    )


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class StateChangeOut(BaseModel):
    id: str
    outcome: str = Field(description="paused | resumed | unchanged | deleted")


class TriggerOut(BaseModel):
    run_id: uuid.UUID
    job_id: str
    scheduled_for: datetime


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+00:01, say: before year 1 in UTC
        raise ValueError("instant out of range") from None


# An instant with its offset, in UTC: one that UTC cannot hold is a bad request, not an error.
UtcInstant = Annotated[AwareDatetime, AfterValidator(_in_utc)]


class BackfillIn(BaseModel):
    since: UtcInstant = Field(description="first instant of the range (inclusive)")
    until: UtcInstant = Field(description="end of the range (exclusive), not in the future")


class BackfillOut(BaseModel):
    job_id: str
    occurrences: int
    created: int = Field(description="runs created; the others existed already")
    run_ids: list[uuid.UUID]


class RunOut(BaseModel):
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
    released_at: datetime | None
    throttled_ms: int | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    lateness_ms: int | None = Field(
        description="released (or first started) minus due: how late it went"
    )


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class AttemptOut(BaseModel):
    attempt: int
    worker: str
    status: str | None = Field(
        description="succeeded | failed | lease_expired | fenced | handed_back; null: running"
    )
    status_code: int | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    due_at: datetime | None = Field(description="when this attempt was due (a retry's own)")
    released_at: datetime | None = Field(description="when the dispatcher released this attempt")
    throttled_ms: int | None = Field(description="how long flow control held this attempt")
    lateness_ms: int | None = Field(
        description="released (or started) minus due, for this attempt; null: not recorded"
    )


class RunDetailOut(RunOut):
    attempts: list[AttemptOut]


class LatenessOut(BaseModel):
    window_seconds: float
    runs: int
    p50_seconds: float | None
    p90_seconds: float | None
    p99_seconds: float | None
    max_seconds: float | None


class OutboxOut(BaseModel):
    runs: int = Field(description="scheduled runs due by now the broker has not acknowledged")
    oldest_due_at: datetime | None
    oldest_age_seconds: float | None


class LagOut(BaseModel):
    group: str
    topic: str
    lag: int | None
    partitions: dict[str, int]
    error: str | None


class ForecastSeries(BaseModel):
    target_service: str
    tenant: str
    runs: float = Field(description="all the runs of the series in the forecast")
    points: list[tuple[int, float]] = Field(
        description="[minutes after start, runs due in that minute] for each minute with runs; "
        "compact, as a day of a busy series has 1,440 of them"
    )


class PileUpOut(BaseModel):
    minute: datetime
    target_service: str
    runs: float
    rate_per_second: float
    limit_per_minute: float


class ForecastOut(BaseModel):
    start: datetime
    end: datetime
    series: list[ForecastSeries]
    pile_ups: list[PileUpOut]


class ShardOut(BaseModel):
    shard: int
    owner: str = Field(description="the planner that claimed the shard last (etcd mode)")
    token: int = Field(description="its fencing token; a lower one is refused")
    claimed_at: datetime
    rejected: int = Field(description="planning transactions the fence refused")


class WhoAmIOut(BaseModel):
    token_id: str
    tenant: str | None
    admin: bool
