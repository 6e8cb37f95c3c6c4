"""Row <-> domain conversions for the store (JSON target column, schedule columns)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from duetime.model import (
    HeaderValue,
    HttpTarget,
    JobDefinition,
    KafkaTarget,
    RunEvent,
    SecretRef,
    Target,
)
from duetime.schedule import RetryPolicy, ScheduleSpec
from duetime.sharding import shard_for

__all__ = [
    "DUE_BATCH_COLUMNS",
    "DueJob",
    "DueJobReader",
    "ExpiredLease",
    "JobShape",
    "OutboxRun",
    "batch_json",
    "batch_json_shared",
    "iso_or_none",
    "job_params",
    "job_record",
    "retry_from_row",
    "spec_from_row",
    "target_from_json",
    "target_to_data",
    "target_to_json",
]


def target_to_data(target: Target) -> dict[str, Any]:
    """The ``target`` column as a JSON-ready value."""
    if isinstance(target, HttpTarget):
        return {
            "http": {
                "url": target.url,
                "method": target.method,
                "headers": [[n, _header_value_to_data(v)] for n, v in target.headers],
                "body": target.body,
                "timeout_ms": _ms(target.timeout),
            }
        }
    return {"kafka": {"topic": target.topic, "key": target.key, "value": target.value}}


def _header_value_to_data(value: HeaderValue) -> str | dict[str, str]:
    """A literal stays a string; a secret reference is stored as the job file writes it
    (``{"secret": NAME, "prefix": TEXT}``), and only the reference: the value is the workers'."""
    if isinstance(value, SecretRef):
        return {"secret": value.name, "prefix": value.prefix}
    return value


def _header_value_from_data(value: Any) -> HeaderValue:
    if isinstance(value, str):
        return value
    return SecretRef(name=value["secret"], prefix=value.get("prefix", ""))


def target_to_json(target: Target) -> str:
    return json.dumps(target_to_data(target))


def target_from_json(value: Any) -> Target:
    data = json.loads(value) if isinstance(value, str) else value
    if "http" in data:
        h = data["http"]
        return HttpTarget(
            url=h["url"],
            method=h["method"],
            headers=tuple((n, _header_value_from_data(v)) for n, v in h["headers"]),
            body=h["body"],
            timeout=timedelta(milliseconds=h["timeout_ms"]),
        )
    k = data["kafka"]
    return KafkaTarget(topic=k["topic"], key=k["key"], value=k["value"])


def batch_json(value: Any) -> str:
    """A bulk statement's rows as one compact JSON parameter (see sql/planner.sql)."""
    return json.dumps(value, separators=(",", ":"))


def batch_json_shared(records: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """``(rows, shared)``: a bulk statement's rows as two JSON parameters, each key in one of them.

    A key whose value is the same in every record goes once into ``shared`` and is left out of
    every row; the statement takes what a row lacks from ``shared`` (sql/planner.sql,
    ``jobs_upsert_many``). Jobs of one file mostly share their schedule, retry policy and
    timeouts, so a batch of 5000 one-off jobs travels as a quarter of the JSON: less to encode
    here, less for PostgreSQL to parse. Every record must have the same keys.
    """
    first = records[0]
    shared = {k: v for k, v in first.items() if all(r[k] == v for r in records)}
    varying = [k for k in first if k not in shared]
    rows = [{k: r[k] for k in varying} for r in records]
    return batch_json(rows), batch_json(shared)


def iso_or_none(instant: datetime | None) -> str | None:
    return None if instant is None else instant.isoformat()


_MILLISECONDS: dict[timedelta, int] = {}


def _ms(value: timedelta) -> int:
    """Whole milliseconds; memoised, as jobs share a few distinct durations (100k per apply)."""
    ms = _MILLISECONDS.get(value)
    if ms is None:
        ms = int(value / timedelta(milliseconds=1))
        if len(_MILLISECONDS) < 10_000:
            _MILLISECONDS[value] = ms
    return ms


def job_record(job: JobDefinition, version: int, next_run_at: datetime | None) -> dict[str, Any]:
    """One row of ``jobs_upsert_many`` as a JSON-ready object (instants in ISO-8601).

    Bulk statements take their rows as one JSON document: the C JSON encoder builds it in a
    fraction of the time the driver needs to quote the same values array element by array
    element (measured: ~20 s for 100k jobs as 25 text arrays, well under 1 s as JSON).
    """
    spec, retry = job.schedule, job.retry
    return {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "shard_id": shard_for(job.job_id),
        "schedule_kind": spec.kind,
        "schedule_expr": spec.expression,
        "time_zone": spec.time_zone,
        "dst_gap": spec.dst_gap,
        "dst_overlap": spec.dst_overlap,
        "start_at": iso_or_none(spec.start_at),
        "window_ms": _ms(job.window),
        "catch_up": job.catch_up,
        "max_catch_up": job.max_catch_up,
        "overlap": job.overlap,
        "target": target_to_data(job.target),
        "target_service": job.target_service,
        "max_attempts": retry.max_attempts,
        "retry_initial_ms": _ms(retry.initial_interval),
        "retry_multiplier": retry.multiplier,
        "retry_max_ms": _ms(retry.max_interval),
        "retry_jitter": retry.jitter,
        "lease_ms": _ms(job.lease),
        "heartbeat_ms": _ms(job.heartbeat_interval),
        "paused": job.paused,
        "next_run_at": iso_or_none(next_run_at),
        "version": version,
    }


def job_params(job: JobDefinition, next_run_at: datetime | None) -> dict[str, Any]:
    """One job as the named parameters of a ``jobs`` row (set-up tools insert with it)."""
    return {
        **job_record(job, job.version, next_run_at),
        "start_at": job.schedule.start_at,
        "target": target_to_json(job.target),
        "next_run_at": next_run_at,
    }


def spec_from_row(row: Any) -> ScheduleSpec:
    """The schedule columns of a ``jobs`` row."""
    return ScheduleSpec(
        kind=row.schedule_kind,
        expression=row.schedule_expr,
        time_zone=row.time_zone,
        dst_gap=row.dst_gap,
        dst_overlap=row.dst_overlap,
        start_at=row.start_at,
    )


def retry_from_row(row: Any, max_attempts: int) -> RetryPolicy:
    """The job's backoff from its row's retry columns; the defaults when the job is gone."""
    if row.retry_initial_ms is None:
        return RetryPolicy(max_attempts=max_attempts)
    return RetryPolicy(
        max_attempts=max_attempts,
        initial_interval=timedelta(milliseconds=row.retry_initial_ms),
        multiplier=row.retry_multiplier,
        max_interval=timedelta(milliseconds=row.retry_max_ms),
        jitter=row.retry_jitter,
    )


@dataclass(frozen=True, eq=False)
class JobShape:
    """A due job's definition: what every run of it carries (target, lease, heartbeat, backoff)
    and how it is scheduled. While the job's row keeps the same definition, the due scan hands
    the planner the same object every time (:class:`DueJobReader`), so what the planner derives
    from it is derived once and kept in ``memo`` (its record template)."""

    tenant: str
    schedule: ScheduleSpec
    window: timedelta
    catch_up: str
    max_catch_up: int
    target_service: str
    max_attempts: int
    target: Target
    lease: timedelta
    heartbeat_interval: timedelta
    retry: RetryPolicy
    #: What a service derives from the definition, kept with it (not part of the definition).
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_row(cls, row: Any) -> JobShape:
        return cls(
            tenant=row.tenant,
            schedule=spec_from_row(row),
            window=timedelta(milliseconds=row.window_ms),
            catch_up=row.catch_up,
            max_catch_up=row.max_catch_up,
            target_service=row.target_service,
            max_attempts=row.max_attempts,
            target=target_from_json(row.target),
            lease=timedelta(milliseconds=row.lease_ms),
            heartbeat_interval=timedelta(milliseconds=row.heartbeat_ms),
            retry=retry_from_row(row, row.max_attempts),
        )


@dataclass(frozen=True)
class DueJob:
    """What the planner needs of a due job: where it stands (its next run, its shard) and its
    definition (:class:`JobShape`, whose fields it also answers for), so that its runs are
    published straight from the planning round."""

    job_id: str
    shape: JobShape
    next_run_at: datetime
    last_scheduled_for: datetime | None
    # The job's shard: a run's insert is fenced by its shard's token (sql/shards.sql).
    shard_id: int = 0

    @classmethod
    def from_row(cls, row: Any) -> DueJob:
        return cls(
            row.job_id,
            JobShape.from_row(row),
            row.next_run_at,
            row.last_scheduled_for,
            row.shard_id,
        )

    @property
    def tenant(self) -> str:
        return self.shape.tenant

    @property
    def schedule(self) -> ScheduleSpec:
        return self.shape.schedule

    @property
    def window(self) -> timedelta:
        return self.shape.window

    @property
    def catch_up(self) -> str:
        return self.shape.catch_up

    @property
    def max_catch_up(self) -> int:
        return self.shape.max_catch_up

    @property
    def target_service(self) -> str:
        return self.shape.target_service

    @property
    def max_attempts(self) -> int:
        return self.shape.max_attempts

    @property
    def target(self) -> Target:
        return self.shape.target

    @property
    def lease(self) -> timedelta:
        return self.shape.lease

    @property
    def heartbeat_interval(self) -> timedelta:
        return self.shape.heartbeat_interval

    @property
    def retry(self) -> RetryPolicy:
        return self.shape.retry


#: Where a due job stands: the first columns of a ``jobs_get_due_batch`` row.
_STANDING = ("job_id", "next_run_at", "last_scheduled_for", "shard_id")
#: ``jobs_get_due_batch``'s columns, in order: where the job stands, then its definition.
DUE_BATCH_COLUMNS = (
    *_STANDING,
    "tenant",
    "schedule_kind",
    "schedule_expr",
    "time_zone",
    "dst_gap",
    "dst_overlap",
    "start_at",
    "window_ms",
    "catch_up",
    "max_catch_up",
    "target_service",
    "max_attempts",
    "target",
    "lease_ms",
    "heartbeat_ms",
    "retry_initial_ms",
    "retry_multiplier",
    "retry_max_ms",
    "retry_jitter",
)


_STANDING_END = len(_STANDING)


class DueJobReader:
    """Makes :class:`DueJob` objects of due-scan rows, parsing a job's definition only when its
    columns differ from the last time the job was read.

    A job due every few seconds is scanned in every batch; parsing its schedule, target (JSON)
    and backoff, and the planner's record template for it, cost ~12 us a job each time
    (bench/reports/spike-bounds.md). Up to ``max_jobs`` definitions are kept (about 1 KB
    each); when more jobs than that are read, the kept ones are dropped and the count starts
    again, so memory stays bounded and a midnight of daily jobs costs only the look-ups.
    """

    def __init__(self, max_jobs: int = 20_000) -> None:
        self._max_jobs = max_jobs
        self._shapes: dict[str, tuple[tuple[Any, ...], JobShape]] = {}
        self.parsed = 0  # definitions parsed (not found unchanged), since start

    def read(self, row: Any) -> DueJob:
        """``row``: one of ``jobs_get_due_batch``, its columns in the order of
        :data:`DUE_BATCH_COLUMNS` (read by position: a slice of a row is ~40 times faster than
        reading its 19 definition columns by name, 4 us a row)."""
        job_id, next_run_at, last_scheduled_for, shard_id = row[:_STANDING_END]
        definition = row[_STANDING_END:]
        kept = self._shapes.get(job_id)
        if kept is not None and kept[0] == definition:
            shape = kept[1]
        else:
            shape = JobShape.from_row(row)
            self.parsed += 1
            if kept is None and len(self._shapes) >= self._max_jobs:
                self._shapes = {}
            self._shapes[job_id] = (definition, shape)
        return DueJob(job_id, shape, next_run_at, last_scheduled_for, shard_id)


@dataclass(frozen=True)
class OutboxRun:
    """A scheduled run not yet acknowledged by the broker."""

    run_id: uuid.UUID
    job_id: str
    tenant: str
    target_service: str
    scheduled_for: datetime
    due_at: datetime
    attempt: int
    max_attempts: int
    target: Target | None
    lease: timedelta
    heartbeat_interval: timedelta
    retry: RetryPolicy

    def event(self, attempt: int) -> RunEvent:
        """The run event of ``attempt`` of this run (its job's target must be known)."""
        assert self.target is not None
        return RunEvent(
            run_id=self.run_id,
            job_id=self.job_id,
            tenant=self.tenant,
            scheduled_for=self.scheduled_for,
            due_at=self.due_at,
            attempt=attempt,
            max_attempts=self.max_attempts,
            target_service=self.target_service,
            target=self.target,
            lease=self.lease,
            heartbeat_interval=self.heartbeat_interval,
            retry=self.retry,
        )


@dataclass(frozen=True)
class ExpiredLease:
    """A running attempt whose lease ran out, locked for the reaper to end it."""

    run_id: uuid.UUID
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    worker: str | None
    retry: RetryPolicy

    @classmethod
    def from_row(cls, row: Any) -> ExpiredLease:
        """From a row of ``runs_get_expired`` or ``runs_expired_among``."""
        return cls(
            run_id=row.run_id,
            scheduled_for=row.scheduled_for,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            lease_token=row.lease_token,
            worker=row.worker,
            retry=retry_from_row(row, row.max_attempts),
        )
