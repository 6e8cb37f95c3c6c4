"""The REST API's reads and actions on PostgreSQL (sql/api.sql), each scoped by tenant.

Every function takes ``tenant``: the tenant of the request's token, or None for an admin token.
A row of another tenant is never read or changed; it is reported as missing, exactly like a
row that does not exist, so an answer never tells whether another tenant has it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from duetime.errors import NotFound
from duetime.forecast import ForecastResult, JobGroup, PlannedRuns, forecast
from duetime.model import run_id_for
from duetime.schedule import ScheduleCache, ScheduleSpec, window_offset

from . import flow
from .queries import query
from .rows import spec_from_row, target_from_json, target_to_data
from .store import NewRun, Tx

__all__ = [
    "RunDetail",
    "job_document",
    "jobs_get",
    "jobs_page",
    "jobs_remove",
    "jobs_tenant_of",
    "runs_backfill",
    "runs_get",
    "runs_page",
    "runs_retry_dead",
    "runs_trigger",
    "stats_forecast",
    "stats_outbox",
]


def jobs_get(conn: Connection, tenant: str | None, job_id: str) -> Any | None:
    return conn.execute(query("api_jobs_get"), {"job_id": job_id, "tenant": tenant}).first()


def jobs_page(
    conn: Connection,
    tenant: str | None,
    *,
    filter_tenant: str | None,
    paused: bool | None,
    text: str | None,
    after: str | None,
    limit: int,
) -> Sequence[Any]:
    params = {
        "tenant": tenant,
        "filter_tenant": filter_tenant,
        "paused": paused,
        "text": text,
        "after": after,
        "limit": limit,
    }
    return conn.execute(query("api_jobs_page"), params).all()


def jobs_tenant_of(conn: Connection, job_id: str) -> str | None:
    row = conn.execute(query("api_jobs_tenant_of"), {"job_id": job_id}).first()
    return None if row is None else str(row.tenant)


def jobs_remove(conn: Connection, tenant: str | None, job_id: str) -> bool:
    params = {"job_id": job_id, "tenant": tenant}
    return conn.execute(query("api_jobs_remove"), params).first() is not None


def job_document(row: Any) -> dict[str, Any]:
    """A stored job in the job-file format (``duetime.jobdef.parse_job`` reads it back)."""
    schedule: dict[str, Any] = {
        row.schedule_kind: row.schedule_expr,
        "time_zone": row.time_zone,
        "dst_gap": row.dst_gap,
        "dst_overlap": row.dst_overlap,
    }
    if row.start_at is not None:
        schedule["start_at"] = row.start_at.isoformat()
    target = target_to_data(target_from_json(row.target))
    if "http" in target:
        http = target["http"]
        target = {
            "http": {
                "url": http["url"],
                "method": http["method"],
                "headers": dict(http["headers"]),
                "body": http["body"],
                "timeout_seconds": http["timeout_ms"] / 1000,
            }
        }
    return {
        "id": row.job_id,
        "tenant": row.tenant,
        "schedule": schedule,
        "window_seconds": row.window_ms / 1000,
        "catch_up": row.catch_up,
        "max_catch_up": row.max_catch_up,
        "overlap": row.overlap,
        "target": target,
        "target_service": row.target_service,
        "retry": {
            "max_attempts": row.max_attempts,
            "initial_interval_seconds": row.retry_initial_ms / 1000,
            "multiplier": row.retry_multiplier,
            "max_interval_seconds": row.retry_max_ms / 1000,
            "jitter": row.retry_jitter,
        },
        "lease_seconds": row.lease_ms / 1000,
        "heartbeat_seconds": row.heartbeat_ms / 1000,
        "paused": row.paused,
        "version": int(row.version),
    }


def runs_page(
    conn: Connection,
    tenant: str | None,
    *,
    filter_tenant: str | None,
    job_id: str | None,
    state: str | None,
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> Sequence[Any]:
    params = {
        "tenant": tenant,
        "filter_tenant": filter_tenant,
        "job_id": job_id,
        "state": state,
        "since": since,
        "until": until,
        "after_scheduled_for": after[0] if after else None,
        "after_run_id": after[1] if after else None,
        "limit": limit,
    }
    return conn.execute(query("api_runs_page"), params).all()


@dataclass(frozen=True)
class RunDetail:
    run: Any
    attempts: Sequence[Any]


def runs_get(conn: Connection, tenant: str | None, run_id: uuid.UUID) -> RunDetail | None:
    run = conn.execute(query("api_runs_get"), {"run_id": run_id, "tenant": tenant}).first()
    if run is None:
        return None
    attempts = conn.execute(
        query("api_run_attempts"), {"run_id": run_id, "scheduled_for": run.scheduled_for}
    ).all()
    return RunDetail(run, attempts)


def runs_retry_dead(conn: Connection, tenant: str | None, run_id: uuid.UUID) -> Any | None:
    """Schedule one more attempt of a dead run; None if it is not a dead run of ``tenant``."""
    return conn.execute(query("api_runs_retry_dead"), {"run_id": run_id, "tenant": tenant}).first()


def _job_or_404(tx: Tx, tenant: str | None, job_id: str) -> Any:
    row = jobs_get(tx.conn, tenant, job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}")
    return row


def _new_runs(tx: Tx, job: Any, instants: Sequence[tuple[datetime, datetime]]) -> set[uuid.UUID]:
    """Insert a run per (scheduled_for, due_at) of ``job``; the ids of those that were new."""
    for day in sorted({scheduled_for.date() for scheduled_for, _ in instants}):
        tx.runs_ensure_partition(day)
    runs = [
        NewRun(
            run_id=run_id_for(job.job_id, scheduled_for),
            job_id=job.job_id,
            tenant=job.tenant,
            target_service=job.target_service,
            scheduled_for=scheduled_for,
            due_at=due,
            max_attempts=job.max_attempts,
        )
        for scheduled_for, due in instants
    ]
    return tx.runs_insert_many(runs)


def runs_trigger(tx: Tx, tenant: str | None, job_id: str) -> tuple[uuid.UUID, datetime]:
    """A run of the job now, besides its schedule (also for a paused job: the user asked).

    Its scheduled_for is the database's now, so it is an occurrence of its own (run_id from
    it), due at once; the planner's outbox publishes it like any run.
    """
    job = _job_or_404(tx, tenant, job_id)
    now = tx.db_now()
    _new_runs(tx, job, [(now, now)])
    return run_id_for(job.job_id, now), now


def runs_backfill(
    tx: Tx,
    tenant: str | None,
    job_id: str,
    since: datetime,
    until: datetime,
    max_runs: int,
    cache: ScheduleCache | None = None,
) -> tuple[list[tuple[uuid.UUID, datetime]], int]:
    """Runs for the job's occurrences in ``[since, until)`` that have none yet.

    Returns (every occurrence's (run_id, scheduled_for), how many were new). Each run keeps its
    place in the job's window; runs already past their due time are released through the
    catch-up drain, like the runs of an outage (docs/flow-control.md). ``ValueError`` if the
    range holds more than ``max_runs`` occurrences.
    """
    job = _job_or_404(tx, tenant, job_id)
    schedule = (cache or ScheduleCache()).get(spec_from_row(job))
    window = timedelta(milliseconds=job.window_ms)
    offset = window_offset(job.job_id, window)
    instants: list[tuple[datetime, datetime]] = []
    current = schedule.next_after(since - timedelta(microseconds=1))
    while current is not None and current < until:
        if len(instants) == max_runs:
            raise ValueError(f"the range holds more than {max_runs} occurrences")
        instants.append((current, current + offset))
        current = schedule.next_after(current)
    if not instants:
        return [], 0
    new = _new_runs(tx, job, instants)
    return [(run_id_for(job.job_id, sf), sf) for sf, _ in instants], len(new)


def stats_outbox(conn: Connection, tenant: str | None) -> Any:
    return conn.execute(query("api_stats_outbox"), {"tenant": tenant}).one()


def stats_forecast(
    conn: Connection,
    tenant: str | None,
    now: datetime,
    horizon: timedelta,
    cache: ScheduleCache | None = None,
    *,
    shard_conns: Sequence[Connection] | None = None,
) -> ForecastResult:
    """Runs due per minute from now to ``now + horizon`` (``duetime.forecast``).

    ``conn`` is the home cluster's (target limits); jobs and runs are read from ``shard_conns``
    (several clusters), by default from ``conn`` too.
    """
    end = now + horizon
    cache = cache or ScheduleCache()
    params = {"tenant": tenant, "horizon": end}
    sources = [conn] if shard_conns is None else shard_conns
    planned = [
        PlannedRuns(r.minute, r.target_service, r.tenant, int(r.runs))
        for source in sources
        for r in source.execute(query("api_forecast_planned"), params)
    ]
    groups = []
    rows = [r for source in sources for r in source.execute(query("api_forecast_jobs"), params)]
    for r in rows:
        spec = ScheduleSpec(
            kind=r.schedule_kind,
            expression=r.schedule_expr,
            time_zone=r.time_zone,
            dst_gap=r.dst_gap,
            dst_overlap=r.dst_overlap,
            start_at=r.start_at,
        )
        groups.append(
            JobGroup(
                schedule=cache.get(spec),
                window=timedelta(milliseconds=r.window_ms),
                target_service=r.target_service,
                tenant=r.tenant,
                next_run_at=r.next_run_at,
                jobs=int(r.jobs),
            )
        )
    own = flow.limits(conn)
    targets = {g.target_service for g in groups} | {p.target_service for p in planned}
    rates: dict[str, float] = {}
    for target in targets:
        rate = flow.effective(own, target).rate
        if rate is not None:
            rates[target] = rate
    return forecast(now, end, groups, planned, rates)
