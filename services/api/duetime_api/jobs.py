"""``/v1/jobs``: create, replace, read, list, delete, pause, resume, trigger now, backfill.

Writes go through ``duetime.jobdef.parse_job`` and ``duetime.store.jobs.jobs_apply_clusters``:
the validation, messages, version rules and tenant quotas of ``duetime jobs apply`` and of the
jobs topic. Every read and write is scoped by the token's tenant (``duetime.store.api``), and
goes to the job's cluster; the list reads every cluster (``routing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from duetime.errors import InvalidInput, NotFound
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.store import api as views
from duetime.store.fanout import each_tx, merge_by_job_id
from duetime.store.jobs import jobs_apply_clusters, jobs_set_paused
from duetime.store.tokens import Principal

from .auth import Caller
from .cursors import decode_job_cursor, encode_cursor
from .errors import ERROR_RESPONSES, ApiError
from .models import (
    JOB_SCHEMA,
    BackfillIn,
    BackfillOut,
    JobOut,
    JobPage,
    StateChangeOut,
    TriggerOut,
)
from .params import check_strings, job_id_param, tenant_param, text_param
from .routing import clusters_of, job_store

__all__ = ["MAX_BACKFILL_RUNS", "router"]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

#: Occurrences one backfill call may create runs for.
MAX_BACKFILL_RUNS = 1000
#: The longest range one backfill call may cover (each day is a partition of ``runs``).
MAX_BACKFILL_RANGE = timedelta(days=31)

_JOB_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": JOB_SCHEMA}},
    }
}


def job_out(row: Any) -> JobOut:
    return JobOut(
        id=row.job_id,
        tenant=row.tenant,
        version=int(row.version),
        paused=row.paused,
        next_run_at=row.next_run_at,
        last_scheduled_for=row.last_scheduled_for,
        created_at=row.created_at,
        updated_at=row.updated_at,
        definition=views.job_document(row),
    )


def _parse(
    body: Any, caller: Principal, path_id: str | None = None, tenant: str | None = None
) -> JobDefinition:
    """The request's job, validated like a job file's; without a ``tenant`` field it is in
    ``tenant`` (a replaced job's own), else in the caller's (a tenant token's)."""
    check_strings(body, "job")
    if isinstance(body, Mapping):
        data = dict(body)
        if path_id is not None:
            given = data.get("id", data.get("job_id"))
            if given is None:
                data["id"] = path_id
            elif given != path_id:
                raise InvalidInput("job.id", "must be the id in the path")
        if tenant or caller.tenant:
            data.setdefault("tenant", tenant or caller.tenant)
        body = data
    job = parse_job(body, "job")
    if caller.tenant is not None and job.tenant != caller.tenant:
        raise InvalidInput("job.tenant", f"this token writes the jobs of tenant {caller.tenant}")
    return job


@router.post("", status_code=201, openapi_extra=_JOB_BODY)
def create_job(
    request: Request, caller: Caller, body: Annotated[Any, Body(include_in_schema=False)]
) -> JobOut:
    """Create a job. An id already in use is a 409 (job ids are global, see docs/api.md)."""
    job = _parse(body, caller)
    store = job_store(request, job.job_id)
    with store.tx() as tx:
        if views.jobs_tenant_of(tx.conn, job.job_id) is not None:
            raise ApiError(409, "job.id: a job with this id exists", "job.id")
    # At least version 1: a job another request created meanwhile is then left as it is
    # ("unchanged"), not overwritten.
    [write] = jobs_apply_clusters(clusters_of(request), [replace(job, version=job.version or 1)])
    if write.action != "created":
        raise ApiError(409, "job.id: a job with this id exists", "job.id")
    with store.tx() as tx:
        row = views.jobs_get(tx.conn, caller.tenant, job.job_id)
    return job_out(row)


@router.put("/{job_id}", openapi_extra=_JOB_BODY)
def replace_job(
    request: Request,
    caller: Caller,
    job_id: str,
    body: Annotated[Any, Body(include_in_schema=False)],
) -> JobOut:
    """Replace a job. A ``version`` in the body must be the stored one (else 409): the write
    is then based on what the caller read; without one the write goes after any other."""
    job_id = job_id_param(job_id)
    store = job_store(request, job_id)
    with store.tx() as tx:
        stored = views.jobs_get(tx.conn, caller.tenant, job_id)
    if stored is None:
        raise NotFound(f"no job {job_id!r}")
    # A body without a tenant keeps the job where it is (an admin's too).
    job = _parse(body, caller, job_id, stored.tenant)
    if job.version and job.version != stored.version:
        raise ApiError(
            409,
            f"job.version: the stored version is {stored.version}; read the job again",
            "job.version",
        )
    [write] = jobs_apply_clusters(clusters_of(request), [replace(job, version=0)])
    if write.action != "updated":
        raise ApiError(409, "job: changed by another writer; read the job again", "job")
    with store.tx() as tx:
        row = views.jobs_get(tx.conn, None, job_id)
    return job_out(row)


@router.get("/{job_id}")
def get_job(request: Request, caller: Caller, job_id: str) -> JobOut:
    job_id = job_id_param(job_id)
    with job_store(request, job_id).tx() as tx:
        row = views.jobs_get(tx.conn, caller.tenant, job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}")
    return job_out(row)


@router.get("")
def list_jobs(
    request: Request,
    caller: Caller,
    tenant: Annotated[str | None, Query(description="only this tenant's (admin)")] = None,
    state: Annotated[str | None, Query(pattern="^(active|paused)$")] = None,
    q: Annotated[str | None, Query(description="a part of the id or target_service")] = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobPage:
    """Jobs ordered by id, a page at a time; a tenant's token lists its own only."""
    after = decode_job_cursor(text_param(cursor, "cursor", 1000))
    clusters = clusters_of(request)
    with each_tx(clusters.stores) as txs:
        parts = [
            views.jobs_page(
                tx.conn,
                caller.tenant,
                filter_tenant=tenant_param(tenant),
                paused=None if state is None else state == "paused",
                text=text_param(q, "q"),
                after=after,
                limit=limit + 1,
            )
            for tx in txs
        ]
        rows = merge_by_job_id(txs[0].conn, parts, limit + 1)
    items = [job_out(r) for r in rows[:limit]]
    more = len(rows) > limit
    return JobPage(items=items, next_cursor=encode_cursor([items[-1].id]) if more else None)


@router.delete("/{job_id}", status_code=204)
def delete_job(request: Request, caller: Caller, job_id: str) -> Response:
    """Remove a job; its run history stays (unpublished runs are cancelled by the outbox)."""
    job_id = job_id_param(job_id)
    with job_store(request, job_id).tx() as tx:
        if not views.jobs_remove(tx.conn, caller.tenant, job_id):
            raise NotFound(f"no job {job_id!r}")
    return Response(status_code=204)


def _pause(request: Request, caller: Principal, job_id: str, paused: bool) -> StateChangeOut:
    job_id = job_id_param(job_id)
    with job_store(request, job_id).tx() as tx:
        if views.jobs_get(tx.conn, caller.tenant, job_id) is None:
            raise NotFound(f"no job {job_id!r}")
        outcome = jobs_set_paused(tx, job_id, paused)
    return StateChangeOut(id=job_id, outcome=outcome)


@router.post("/{job_id}/pause")
def pause_job(request: Request, caller: Caller, job_id: str) -> StateChangeOut:
    """Stop planning the job (runs already planned still run)."""
    return _pause(request, caller, job_id, True)


@router.post("/{job_id}/resume")
def resume_job(request: Request, caller: Caller, job_id: str) -> StateChangeOut:
    """Plan the job again from its next occurrence after now (no catch-up for the pause)."""
    return _pause(request, caller, job_id, False)


@router.post("/{job_id}/trigger", status_code=201)
def trigger_job(request: Request, caller: Caller, job_id: str) -> TriggerOut:
    """Run the job now, once, besides its schedule."""
    job_id = job_id_param(job_id)
    with job_store(request, job_id).tx() as tx:
        run_id, scheduled_for = views.runs_trigger(tx, caller.tenant, job_id)
    return TriggerOut(run_id=run_id, job_id=job_id, scheduled_for=scheduled_for)


@router.post("/{job_id}/backfill", status_code=201)
def backfill_job(request: Request, caller: Caller, job_id: str, body: BackfillIn) -> BackfillOut:
    """Create the runs of the job's occurrences in [since, until) that have none (at most
    1,000 occurrences and 31 days per call; ``until`` not in the future). Late runs go through the
    catch-up drain like the runs of an outage."""
    job_id = job_id_param(job_id)
    since, until = body.since, body.until  # in UTC already (``UtcInstant``)
    if since.year < 1970:
        raise InvalidInput("since", "must not be before 1970")
    if since >= until:
        raise InvalidInput("until", "must be after since")
    if until - since > MAX_BACKFILL_RANGE:
        raise InvalidInput("until", f"the range may span {MAX_BACKFILL_RANGE.days} days at most")
    with job_store(request, job_id).tx() as tx:
        if until > tx.db_now():
            raise InvalidInput("until", "must not be in the future (the planner plans those)")
        try:
            runs, created = views.runs_backfill(
                tx, caller.tenant, job_id, since, until, MAX_BACKFILL_RUNS
            )
        except ValueError as exc:
            raise InvalidInput("until", f"{exc}: ask for a shorter range") from exc
    return BackfillOut(
        job_id=job_id, occurrences=len(runs), created=created, run_ids=[r for r, _ in runs]
    )
