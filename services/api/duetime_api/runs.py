"""``/v1/runs``: run history (by job, state, time range), a run with every attempt, retrying a
dead run. Scoped by the token's tenant like every endpoint (``duetime.store.api``). One job's
runs are read in its cluster, all runs on every cluster, merged; a run named by id is looked up
on each cluster (``routing``)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from duetime.errors import NotFound
from duetime.model import RunState
from duetime.store import api as views
from duetime.store.fanout import each_tx, merge_newest_runs

from .auth import Caller
from .cursors import decode_run_cursor, encode_cursor
from .errors import ERROR_RESPONSES, ApiError
from .models import AttemptOut, RunDetailOut, RunOut, RunPage, UtcInstant
from .params import tenant_param, text_param
from .routing import run_store, stores_for

__all__ = ["lateness_ms", "router"]

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERROR_RESPONSES)

_STATES = "^(" + "|".join(s.value for s in RunState) + ")$"


def lateness_ms(row: Any) -> int | None:
    """How late the run (or one attempt) went out: released (or, for one released before that
    was recorded, first started) minus due; for a retried run due_at is its retry's, an
    attempt row keeps its own (None on attempts recorded before it was kept)."""
    went = row.released_at or row.started_at
    if went is None or row.due_at is None:
        return None
    return int((went - row.due_at).total_seconds() * 1000)


def _run_fields(row: Any) -> dict[str, Any]:
    return {
        "run_id": row.run_id,
        "job_id": row.job_id,
        "tenant": row.tenant,
        "target_service": row.target_service,
        "scheduled_for": row.scheduled_for,
        "due_at": row.due_at,
        "state": row.state,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "worker": row.worker,
        "released_at": row.released_at,
        "throttled_ms": row.throttled_ms,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "last_error": row.last_error,
        "lateness_ms": lateness_ms(row),
    }


@router.get("")
def list_runs(
    request: Request,
    caller: Caller,
    job_id: str | None = None,
    state: Annotated[str | None, Query(pattern=_STATES)] = None,
    since: Annotated[UtcInstant | None, Query(description="scheduled_for >= since")] = None,
    until: Annotated[UtcInstant | None, Query(description="scheduled_for < until")] = None,
    tenant: Annotated[str | None, Query(description="only this tenant's (admin)")] = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RunPage:
    """Runs, newest scheduled_for first, a page at a time."""
    after = decode_run_cursor(text_param(cursor, "cursor", 1000))
    job_id = text_param(job_id, "job_id")
    with each_tx(stores_for(request, job_id)) as txs:
        parts = [
            views.runs_page(
                tx.conn,
                caller.tenant,
                filter_tenant=tenant_param(tenant),
                job_id=job_id,
                state=state,
                since=since,
                until=until,
                after=after,
                limit=limit + 1,
            )
            for tx in txs
        ]
    rows = merge_newest_runs(parts, limit + 1)
    items = [RunOut(**_run_fields(r)) for r in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = items[-1]
        next_cursor = encode_cursor([last.scheduled_for.isoformat(), str(last.run_id)])
    return RunPage(items=items, next_cursor=next_cursor)


@router.get("/{run_id}")
def get_run(request: Request, caller: Caller, run_id: uuid.UUID) -> RunDetailOut:
    """A run with every attempt: worker, status, error, duration, lateness, throttled time."""
    with run_store(request, caller.tenant, run_id).tx() as tx:
        detail = views.runs_get(tx.conn, caller.tenant, run_id)
    if detail is None:
        raise NotFound(f"no run {run_id}")
    attempts = [
        AttemptOut(
            attempt=a.attempt,
            worker=a.worker,
            status=a.outcome,
            status_code=a.status_code,
            error=a.error,
            started_at=a.started_at,
            finished_at=a.finished_at,
            duration_ms=a.duration_ms,
            due_at=a.due_at,
            released_at=a.released_at,
            throttled_ms=a.throttled_ms,
            lateness_ms=lateness_ms(a),
        )
        for a in detail.attempts
    ]
    return RunDetailOut(**_run_fields(detail.run), attempts=attempts)


@router.post("/{run_id}/retry")
def retry_run(request: Request, caller: Caller, run_id: uuid.UUID) -> RunDetailOut:
    """One more attempt for a dead run, due now; 409 if the run is not dead."""
    with run_store(request, caller.tenant, run_id).tx() as tx:
        retried = views.runs_retry_dead(tx.conn, caller.tenant, run_id)
        detail = views.runs_get(tx.conn, caller.tenant, run_id)
    if detail is None:
        raise NotFound(f"no run {run_id}")
    if retried is None:
        raise ApiError(
            409, f"state: the run is {detail.run.state}; only a dead run can be retried", "state"
        )
    return get_run(request, caller, run_id)
