"""The web dashboard in-process on a real PostgreSQL: sign-in cookie, tenant isolation, CSRF.

The browser test (tests/e2e/test_dashboard_browser.py) drives the pages in Chromium on a running
pipeline; these pin the rules a browser does not show: what the cookie is, what another tenant
gets, which writes are refused.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from duetime.store.tokens import tokens_revoke
from duetime_api.dashboard.session import csrf_token

from .api_client import Api, dead_run, http_job, open_api

pytestmark = pytest.mark.integration


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with open_api(database_url) as handle:
        yield handle


def _token(api: Api, tenant: str | None) -> str:
    return api.token(tenant)["Authorization"].removeprefix("Bearer ")


def _sign_in(api: Api, token: str) -> None:
    answer = api.client.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/"


def test_sign_in_sets_an_http_only_strict_cookie_and_sign_out_clears_it(api: Api) -> None:
    token = _token(api, "acme")
    first = api.client.get("/ui/", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/ui/login"
    wrong = api.client.post("/ui/login", data={"token": "dt_x"}, follow_redirects=False)
    assert wrong.status_code == 401 and "not valid" in wrong.text

    answer = api.client.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"duetime_token={token};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    page = api.client.get("/ui/")
    assert page.status_code == 200 and "tenant acme" in page.text
    assert "script" not in page.text.lower()
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    # The REST API does not take the cookie: /v1 wants the Authorization header.
    assert api.client.get("/v1/jobs").status_code == 401

    csrf = csrf_token(token)
    out = api.client.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and 'duetime_token=""' in out.headers["set-cookie"]
    assert api.client.get("/ui/", follow_redirects=False).status_code == 303


def test_a_revoked_token_ends_the_session(api: Api) -> None:
    token = _token(api, "acme")
    _sign_in(api, token)
    assert api.client.get("/ui/jobs").status_code == 200
    with api.store.tx() as tx:
        assert tokens_revoke(tx.conn, token.split("_")[1])
    answer = api.client.get("/ui/jobs", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
    assert 'duetime_token=""' in answer.headers["set-cookie"]


def test_another_tenants_jobs_and_runs_are_not_found(api: Api) -> None:
    acme, globex = api.token("acme"), api.token("globex")
    for job_id, headers in (("acme.flaky", acme), ("globex.flaky", globex)):
        body = http_job(job_id, retry={"max_attempts": 1})
        assert api.client.post("/v1/jobs", json=body, headers=headers).status_code == 201
    globex_run = dead_run(api, "globex.flaky", globex)
    acme_run = dead_run(api, "acme.flaky", acme)

    token = acme["Authorization"].removeprefix("Bearer ")
    _sign_in(api, token)
    overview = api.client.get("/ui/").text
    assert str(acme_run) in overview and str(globex_run) not in overview
    assert "globex" not in api.client.get("/ui/jobs").text
    assert "globex" not in api.client.get("/ui/jobs", params={"q": "flaky"}).text
    for path in (
        "/ui/jobs/globex.flaky",
        "/ui/jobs/no-such-job",
        f"/ui/runs/{globex_run}",
        f"/ui/runs/{uuid.uuid4()}",
        "/ui/runs/not-a-uuid",
    ):
        answer = api.client.get(path)
        assert answer.status_code == 404, path
        assert "There is no" in answer.text
    # Retrying another tenant's dead run, with a valid CSRF token: not found, and still dead.
    csrf = csrf_token(token)
    refused = api.client.post(f"/ui/runs/{globex_run}/retry", data={"csrf": csrf})
    assert refused.status_code == 404
    admin = api.token(None)
    assert api.client.get(f"/v1/runs/{globex_run}", headers=admin).json()["state"] == "dead"


def test_retry_needs_the_sessions_csrf_token_and_the_same_origin(api: Api) -> None:
    acme = api.token("acme")
    body = http_job("acme.flaky", retry={"max_attempts": 1})
    assert api.client.post("/v1/jobs", json=body, headers=acme).status_code == 201
    run_id = dead_run(api, "acme.flaky", acme)
    token = acme["Authorization"].removeprefix("Bearer ")
    _sign_in(api, token)
    page = api.client.get(f"/ui/runs/{run_id}").text
    [csrf] = re.findall(r'name="csrf" value="([0-9a-f]{64})"', page)[-1:]
    assert csrf == csrf_token(token)

    path = f"/ui/runs/{run_id}/retry"
    for data, headers in (
        ({}, {}),
        ({"csrf": "0" * 64}, {}),
        ({"csrf": csrf_token(_token(api, "acme"))}, {}),  # another session's
        ({"csrf": csrf}, {"Origin": "http://evil.test"}),
        ({"csrf": csrf}, {"Origin": "null"}),
    ):
        answer = api.client.post(path, data=data, headers=headers, follow_redirects=False)
        assert answer.status_code == 403, (data, headers)
    json_body = api.client.post(path, json={"csrf": csrf}, follow_redirects=False)
    assert json_body.status_code == 403
    assert api.client.get(f"/v1/runs/{run_id}", headers=acme).json()["state"] == "dead"

    done = api.client.post(
        path, data={"csrf": csrf}, headers={"Origin": "http://testserver"}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"/ui/runs/{run_id}?retried=1"
    detail = api.client.get(f"/v1/runs/{run_id}", headers=acme).json()
    assert detail["state"] == "scheduled" and detail["max_attempts"] == 2
    notice = api.client.get(done.headers["location"]).text
    assert "attempt 2 of 2 is scheduled" in notice
    again = api.client.post(path, data={"csrf": csrf})
    assert again.status_code == 409 and "only a dead run can be retried" in again.text


def test_the_dashboard_is_not_in_the_openapi_document(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]
    assert "/v1/jobs" in paths
    css = api.client.get("/ui/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
