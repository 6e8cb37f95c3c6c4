"""The dashboard's routes under ``/ui`` (not in the OpenAPI document: they answer HTML).

Every page reads through the same tenant-scoped store functions as the REST API
(``duetime.store.api``), with the tenant of the token in the session cookie (``session``): an
other tenant's job or run is the same 404 page as one that does not exist. Retry is the API's
retry (``runs_retry_dead``), posted by a form with the session's CSRF token. Like the API, a
page of one job reads the job's cluster, a run is looked up on each cluster, lists and figures
read every cluster (``..routing``, ``..cluster_stats``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from duetime.logs import event
from duetime.schedule import compile_schedule
from duetime.store import Store
from duetime.store import api as views
from duetime.store import dashboard as dash
from duetime.store.fanout import each_tx, merge_by_job_id, merge_newest_runs
from duetime.store.rows import spec_from_row
from duetime.store.sign_in_links import SignInRefused, sign_in_links_use
from duetime.store.tokens import Principal

from ..auth import authenticate, store_of
from ..cluster_stats import (
    dead_recent_all,
    forecast_all,
    lateness_all,
    outbox_all,
    queue_depth_all,
)
from ..routing import clusters_of, job_store, run_store
from . import pages
from .session import (
    clear_cookie,
    csrf_token,
    form_fields,
    same_origin,
    session_token,
    set_cookie,
    valid_csrf,
)

__all__ = ["router"]

log = logging.getLogger("duetime.api")

router = APIRouter(include_in_schema=False)

_STATIC = Path(__file__).parent / "static"
#: Occurrences a job page lists, and how far ahead it looks for DST changes.
_OCCURRENCES = 10
_DST_HORIZON = timedelta(days=366)
_RUNS_SHOWN = 25
_JOBS_PER_PAGE = 50
_HEADERS = {
    # Nothing but this origin's stylesheet: no script runs, no frame may hold a page (so the
    # retry button cannot be clickjacked), no referrer leaves the origin. (``no-referrer``
    # would make Chromium send ``Origin: null`` with the forms, which the origin check refuses.)
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Viewer = tuple[Principal, str]


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _redirect(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303, headers={"Cache-Control": "no-store"})


def _viewer(request: Request) -> Viewer | None:
    """The session's principal and CSRF token, None without a valid session."""
    token = session_token(request)
    if token is None:
        return None
    found = authenticate(request, token)
    return None if found is None else (found, csrf_token(token))


def _to_login(request: Request) -> Response:
    response = _redirect(request, "/ui/login")
    if session_token(request) is not None:
        clear_cookie(response, request)  # revoked or unknown: forget it
    return response


def _not_found(what: str, viewer: Viewer) -> HTMLResponse:
    return _html(pages.message_page("Not found", f"There is no {what}.", *viewer), 404)


def _latest_runs(
    stores: Sequence[Store],
    tenant: str | None,
    *,
    job_id: str | None = None,
    state: str | None = None,
) -> Sequence[Any]:
    """The newest runs (by scheduled_for) of the tenant, a job or a state, on ``stores``."""
    with each_tx(stores) as txs:
        parts = [
            views.runs_page(
                tx.conn,
                tenant,
                filter_tenant=None,
                job_id=job_id,
                state=state,
                since=None,
                until=None,
                after=None,
                limit=_RUNS_SHOWN,
            )
            for tx in txs
        ]
    return merge_newest_runs(parts, _RUNS_SHOWN)


@router.get("/")
@router.get("/ui")
def root(request: Request) -> Response:
    return _redirect(request, "/ui/")


@router.get("/ui/static/dashboard.css")
def stylesheet() -> Response:
    css = (_STATIC / "dashboard.css").read_text(encoding="utf-8")
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})


@router.get("/ui/login")
def login_form(request: Request) -> Response:
    if _viewer(request) is not None:
        return _redirect(request, "/ui/")
    return _html(pages.login_page())


@router.post("/ui/login")
async def login(request: Request) -> Response:
    fields = await form_fields(request)
    if fields is None or not same_origin(request):
        return _html(pages.login_page("The sign-in form was not sent by this dashboard."), 400)
    token = fields.get("token", "").strip()
    found = await run_in_threadpool(authenticate, request, token) if token else None
    if found is None:
        return _html(pages.login_page("That token is not valid (or was revoked)."), 401)
    response = _redirect(request, "/ui/")
    set_cookie(response, request, token)
    return response


_LINK_REFUSALS = {
    "unknown": (404, "That sign-in link is not valid."),
    "used": (410, "That sign-in link was already used: each link signs in once."),
    "expired": (410, "That sign-in link has expired: a link works for 15 minutes."),
    "revoked": (410, "The token that sign-in link was made for has been revoked."),
}


@router.get("/ui/sign-in/{code}")
def sign_in_link(request: Request, code: str) -> Response:
    """``duetime up``'s one-time link: a new session token of the link's scope in the cookie,
    then the overview. The cookie is set on this answer and the redirect to ``/ui/`` is a
    same-origin navigation, so the SameSite=Strict cookie goes with it."""
    with store_of(request).tx() as tx:
        outcome = sign_in_links_use(tx.conn, code)
    if isinstance(outcome, SignInRefused):
        event(log, "dashboard.sign_in_link_refused", logging.WARNING, reason=outcome.reason)
        status, message = _LINK_REFUSALS[outcome.reason]
        return _html(pages.login_page(f"{message} Sign in with a token instead."), status)
    event(
        log,
        "dashboard.signed_in_by_link",
        token_id=outcome.session.token_id,
        link_token_id=outcome.link_token_id,
    )
    response = _redirect(request, "/ui/")
    set_cookie(response, request, outcome.session.token)
    return response


async def _checked_post(request: Request) -> tuple[str, dict[str, str]] | Response:
    """The session token and form of a write, or the answer refusing it."""
    token = session_token(request)
    fields = await form_fields(request)
    if token is None:
        return _to_login(request)
    if fields is None or not same_origin(request) or not valid_csrf(token, fields.get("csrf")):
        return _html(
            pages.message_page("Refused", "The form was not sent by this page.", None), 403
        )
    return token, fields


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    checked = await _checked_post(request)
    if isinstance(checked, Response):
        return checked
    response = _redirect(request, "/ui/login")
    clear_cookie(response, request)
    return response


@router.get("/ui/")
def overview(request: Request) -> Response:
    viewer = _viewer(request)
    if viewer is None:
        return _to_login(request)
    tenant = viewer[0].tenant
    clusters = clusters_of(request)
    view = pages.Overview(
        forecast=forecast_all(clusters, tenant, timedelta(hours=24)),
        lateness=lateness_all(clusters, tenant, 3600),
        outbox=outbox_all(clusters, tenant),
        depth=queue_depth_all(clusters, tenant),
        dead_recent=dead_recent_all(clusters, tenant, 86_400),
        dead_runs=_latest_runs(clusters.stores, tenant, state="dead"),
    )
    return _html(pages.overview_page(view, *viewer))


@router.get("/ui/jobs")
def jobs(request: Request, q: str | None = None, after: str | None = None) -> Response:
    viewer = _viewer(request)
    if viewer is None:
        return _to_login(request)
    q = (q or "").strip()[:200] or None
    with each_tx(clusters_of(request).stores) as txs:
        parts = [
            views.jobs_page(
                tx.conn,
                viewer[0].tenant,
                filter_tenant=None,
                paused=None,
                text=q,
                after=(after or None),
                limit=_JOBS_PER_PAGE + 1,
            )
            for tx in txs
        ]
        rows = merge_by_job_id(txs[0].conn, parts, _JOBS_PER_PAGE + 1)
    shown = rows[:_JOBS_PER_PAGE]
    next_after = shown[-1].job_id if len(rows) > _JOBS_PER_PAGE else None
    definitions = [views.job_document(r) for r in shown]
    return _html(pages.jobs_page(shown, definitions, q, next_after, *viewer))


@router.get("/ui/jobs/{job_id}")
def job(request: Request, job_id: str) -> Response:
    viewer = _viewer(request)
    if viewer is None:
        return _to_login(request)
    tenant = viewer[0].tenant
    store = job_store(request, job_id)
    with store.tx() as tx:
        row = views.jobs_get(tx.conn, tenant, job_id)
        if row is None:
            return _not_found(f"job {job_id!r}", viewer)
        now = tx.db_now()
    runs = _latest_runs([store], tenant, job_id=job_id)
    with store.tx() as tx:
        attempts = dash.attempts_of_runs(tx.conn, (r.run_id for r in runs))
    schedule = compile_schedule(spec_from_row(row))
    return _html(
        pages.job_page(
            row,
            views.job_document(row),
            schedule.occurrences(now, _OCCURRENCES),
            schedule.dst_effects(now, now + _DST_HORIZON),
            runs,
            attempts,
            *viewer,
        )
    )


def _run_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


@router.get("/ui/runs/{run_id}")
def run(request: Request, run_id: str, retried: int = 0) -> Response:
    viewer = _viewer(request)
    if viewer is None:
        return _to_login(request)
    parsed = _run_id(run_id)
    store = store_of(request) if parsed is None else run_store(request, viewer[0].tenant, parsed)
    with store.tx() as tx:
        detail = None if parsed is None else views.runs_get(tx.conn, viewer[0].tenant, parsed)
        now = tx.db_now()
    if detail is None:
        return _not_found(f"run {run_id}", viewer)
    return _html(pages.run_page(detail, now, retried == 1, *viewer))


def _retry(request: Request, token: str, run_id: str) -> Response:
    caller = authenticate(request, token)
    if caller is None:
        return _to_login(request)
    viewer = (caller, csrf_token(token))
    parsed = _run_id(run_id)
    store = store_of(request) if parsed is None else run_store(request, caller.tenant, parsed)
    with store.tx() as tx:
        retried = None if parsed is None else views.runs_retry_dead(tx.conn, caller.tenant, parsed)
        detail = None if parsed is None else views.runs_get(tx.conn, caller.tenant, parsed)
    if detail is None:
        return _not_found(f"run {run_id}", viewer)
    if retried is None:
        message = f"The run is {detail.run.state}; only a dead run can be retried."
        return _html(pages.message_page("Not retried", message, *viewer), 409)
    return _redirect(request, f"/ui/runs/{quote(str(parsed))}?retried=1")


@router.post("/ui/runs/{run_id}/retry")
async def retry(request: Request, run_id: str) -> Response:
    """One more attempt of a dead run (the REST API's ``POST /v1/runs/{id}/retry``)."""
    checked = await _checked_post(request)
    if isinstance(checked, Response):
        return checked
    return await run_in_threadpool(_retry, request, checked[0], run_id)
