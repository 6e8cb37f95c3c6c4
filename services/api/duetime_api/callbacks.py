"""``/v1/runs/{run_id}/attempts/{n}/heartbeat|complete``: an async target reports (docs/targets.md,
"Async targets").

A target that answered ``202 Accepted`` holds its attempt's lease. It authenticates with the
attempt's callback token (``X-Duetime-Callback-Token``, sent with the request; it is the
attempt's lease token, ``duetime.async_targets``), not with a bearer token: a target rarely holds
a duetime API token, and the callback token lets it act on that one attempt only. Answers:

- 200: applied;
- 401: no callback token;
- 404: no such attempt, or a token that is not that attempt's (the same answer, so nothing tells
  whether the run exists);
- 409 ``fenced``: the attempt no longer holds the run (its lease expired, the run moved on);
  nothing changed, and the call is recorded in ``run_fenced_completions``;
- 409 ``ended``: the target already ended the attempt (a heartbeat after its completion, a
  completion contradicting the first); nothing changed.

The token is never logged: the access log has the path only, and the events here name the run
and the attempt.

With several PostgreSQL clusters the call carries no job id, so it is tried on each cluster in
turn until one knows the attempt: a cluster without it changes nothing and answers ``unknown``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Path, Request
from pydantic import AwareDatetime, BaseModel, Field
from sqlalchemy import Connection

from duetime.async_targets import CALLBACK_TOKEN, MAX_PROGRESS, progress_problem
from duetime.fencing import claimed_token
from duetime.logs import event
from duetime.store.callbacks import (
    CallbackAttempt,
    CallbackResult,
    attempts_callback_complete,
    attempts_callback_heartbeat,
)

from .errors import ERROR_RESPONSES, ApiError
from .metrics import ApiMetrics
from .routing import clusters_of

__all__ = ["AttemptCompleteIn", "AttemptHeartbeatIn", "AttemptReportOut", "router"]

log = logging.getLogger("duetime.api")

router = APIRouter(prefix="/v1/runs", tags=["async targets"], responses=ERROR_RESPONSES)

_Progress = Annotated[
    str | None,
    Field(
        max_length=MAX_PROGRESS,
        description="kept on the run and sent to its next attempt in X-Duetime-Resume "
        f"(printable ASCII, at most {MAX_PROGRESS} characters)",
    ),
]
_Attempt = Annotated[int, Path(ge=1, le=1_000_000, description="X-Duetime-Attempt")]
_Token = Annotated[
    str | None,
    Header(
        alias=CALLBACK_TOKEN,
        max_length=200,
        description="the attempt's callback token, from the request duetime sent",
    ),
]
_Fencing = Annotated[
    int | None,
    Header(
        alias="X-Duetime-Fencing-Token",
        description="optional: the attempt's fencing token; another one is refused as fenced",
    ),
]


class AttemptHeartbeatIn(BaseModel):
    progress: _Progress = None


class AttemptCompleteIn(BaseModel):
    outcome: Literal["succeeded", "failed"]
    error: Annotated[str | None, Field(max_length=2000)] = None
    retryable: Annotated[
        bool, Field(description="a failure worth another attempt (if attempts remain)")
    ] = True
    progress: _Progress = None


class AttemptReportOut(BaseModel):
    run_id: uuid.UUID
    attempt: int
    state: str
    lease_expires_at: AwareDatetime | None = None


def _call(
    request: Request,
    run_id: uuid.UUID,
    attempt: _Attempt,
    token: _Token = None,
    fencing: _Fencing = None,
) -> CallbackAttempt:
    """The attempt a call names, with the token it brings (a dependency of both endpoints)."""
    if token is None:
        raise ApiError(401, f"the attempt's callback token is required ({CALLBACK_TOKEN})")
    try:
        lease_token = uuid.UUID(token)
    except ValueError:
        raise ApiError(404, f"no attempt {attempt} of run {run_id} with this token") from None
    call = CallbackAttempt(run_id, attempt, lease_token)
    if fencing is not None and fencing != claimed_token(attempt):
        kind = request.url.path.rsplit("/", 1)[-1]  # heartbeat | complete: the route matched
        _refuse(request, call, kind, f"fencing token {fencing} is not attempt {attempt}'s")
    return call


_Call = Annotated[CallbackAttempt, Depends(_call)]


def _check_progress(progress: str | None, field: str) -> None:
    if progress is not None and (problem := progress_problem(progress)) is not None:
        raise ApiError(400, f"{field}: {problem}", field)


def _refuse(request: Request, call: CallbackAttempt, kind: str, why: str) -> None:
    _count_fenced(request, kind)
    event(
        log,
        "attempt.callback_fenced",
        logging.WARNING,
        run_id=call.run_id,
        attempt=call.attempt,
        call=kind,
        reason=why,
    )
    raise ApiError(409, f"fenced: {why}; nothing was changed", "attempt")


def _metrics(request: Request) -> ApiMetrics:
    metrics: ApiMetrics = request.app.state.metrics
    return metrics


def _count_fenced(request: Request, kind: str) -> None:
    if kind == "heartbeat":
        _metrics(request).heartbeats.labels("fenced").inc()
    else:
        _metrics(request).completions_fenced.inc()


def _answer(
    request: Request, call: CallbackAttempt, kind: str, result: CallbackResult
) -> AttemptReportOut:
    if result.status == "unknown":
        raise ApiError(404, f"no attempt {call.attempt} of run {call.run_id} with this token")
    if result.status == "ended":
        raise ApiError(
            409,
            f"ended: attempt {call.attempt} already ended as {result.ended_as} (the run is "
            f"{result.state}); nothing was changed",
            "attempt",
        )
    if result.status == "fenced":
        _refuse(
            request,
            call,
            kind,
            f"attempt {call.attempt} no longer holds the run (the run is {result.state})",
        )
    assert result.state is not None
    return AttemptReportOut(
        run_id=call.run_id,
        attempt=call.attempt,
        state=result.state,
        lease_expires_at=result.lease_expires_at,
    )


def _on_its_cluster(
    request: Request, apply: Callable[[Connection], CallbackResult]
) -> CallbackResult:
    """``apply`` on each cluster (one transaction each) until one knows the attempt."""
    result = CallbackResult("unknown")
    for store in clusters_of(request):
        with store.tx() as tx:
            result = apply(tx.conn)
        if result.status != "unknown":
            break
    return result


@router.post("/{run_id}/attempts/{attempt}/heartbeat")
def heartbeat(request: Request, call: _Call, body: AttemptHeartbeatIn) -> AttemptReportOut:
    """Renew the attempt's lease (the job's lease from now) and keep its progress."""
    _check_progress(body.progress, "progress")
    result = _on_its_cluster(
        request, lambda conn: attempts_callback_heartbeat(conn, call, body.progress)
    )
    if result.status == "ok":
        _metrics(request).heartbeats.labels("accepted").inc()
    return _answer(request, call, "heartbeat", result)


@router.post("/{run_id}/attempts/{attempt}/complete")
def complete(request: Request, call: _Call, body: AttemptCompleteIn) -> AttemptReportOut:
    """End the attempt: succeeded, or failed (retried after the job's backoff, or dead)."""
    _check_progress(body.progress, "progress")
    result = _on_its_cluster(
        request,
        lambda conn: attempts_callback_complete(
            conn,
            call,
            succeeded=body.outcome == "succeeded",
            retryable=body.retryable,
            error=body.error,
            progress=body.progress,
        ),
    )
    if result.status == "ok":
        assert result.state is not None
        if not result.repeated:  # a call repeated after a lost answer ended nothing new
            _metrics(request).count_completion(result.state)
        event(
            log,
            "attempt.callback_completed",
            run_id=call.run_id,
            attempt=call.attempt,
            state=result.state,
        )
    return _answer(request, call, "complete", result)
