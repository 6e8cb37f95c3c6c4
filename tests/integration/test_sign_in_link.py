"""``duetime up``'s one-time dashboard sign-in link on a real PostgreSQL (migration 0016).

The link signs in once, for 15 minutes, with a new token of its token's scope; a second use, an
expired, unknown or malformed code, and a link whose token was revoked get the sign-in page with
a message and a 4xx. The code is stored hashed only and never reaches a log line: neither the
access log (uvicorn's record, through the filter ``duetime service api`` installs) nor an event.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from duetime.api_tokens import issue_sign_in_code
from duetime.store.sign_in_links import (
    SIGN_IN_LINK_NAME,
    SIGN_IN_LINK_VALID_FOR,
    SignedIn,
    sign_in_links_create,
    sign_in_links_use,
)
from duetime.store.tokens import tokens_create, tokens_list, tokens_revoke
from duetime_api.access_log import REDACTED_PATH, install_access_log_redaction

from .api_client import Api, open_api

pytestmark = pytest.mark.integration


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with open_api(database_url) as handle:
        yield handle


def _link(api: Api, tenant: str | None = None) -> tuple[str, str]:
    """A new link's code for a new token of ``tenant`` (None: admin), and that token's id."""
    with api.store.tx() as tx:
        issued, _record = tokens_create(tx.conn, tenant=tenant, name="duetime up")
        link = sign_in_links_create(tx.conn, issued.token_id)
    assert issued.token not in repr(link) and link.code not in repr(link)
    return link.code, issued.token_id


def test_a_link_signs_in_once_with_a_new_token_of_its_scope(api: Api) -> None:
    code, token_id = _link(api)
    with api.store.tx() as tx:
        row = tx.conn.execute(text("SELECT * FROM sign_in_links")).one()
        remaining = tx.conn.execute(text("SELECT expires_at - now() AS left FROM sign_in_links"))
        left = remaining.one().left
    # Only the hash is stored, tied to the token the link was made for.
    assert bytes(row.code_sha256) == hashlib.sha256(code.encode()).digest()
    assert code not in str(tuple(row)) and row.token_id == token_id and row.used_at is None
    assert SIGN_IN_LINK_VALID_FOR - timedelta(minutes=1) < left <= SIGN_IN_LINK_VALID_FOR

    answer = api.client.get(f"/ui/sign-in/{code}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("duetime_token=dt_")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    page = api.client.get("/ui/")
    assert page.status_code == 200 and "admin: every tenant" in page.text

    with api.store.tx() as tx:
        used = tx.conn.execute(text("SELECT used_at, session_token_id FROM sign_in_links")).one()
        sessions = [t for t in tokens_list(tx.conn) if t.name == SIGN_IN_LINK_NAME]
    assert used.used_at is not None
    assert [(s.token_id, s.admin) for s in sessions] == [(used.session_token_id, True)]

    api.client.cookies.clear()
    again = api.client.get(f"/ui/sign-in/{code}", follow_redirects=False)
    assert again.status_code == 410 and "already used" in again.text
    assert "set-cookie" not in again.headers
    assert api.client.get("/ui/", follow_redirects=False).status_code == 303


def test_a_tenants_link_signs_in_as_that_tenant(api: Api) -> None:
    code, _token_id = _link(api, "acme")
    assert api.client.get(f"/ui/sign-in/{code}").status_code == 200
    assert "tenant acme" in api.client.get("/ui/").text


def test_an_expired_link_is_refused(api: Api) -> None:
    code, _token_id = _link(api)
    with api.store.tx() as tx:
        tx.conn.execute(
            text(
                "UPDATE sign_in_links SET created_at = now() - interval '16 minutes', "
                "expires_at = now() - interval '1 minute'"
            )
        )
    answer = api.client.get(f"/ui/sign-in/{code}", follow_redirects=False)
    assert answer.status_code == 410 and "has expired" in answer.text
    assert "set-cookie" not in answer.headers
    with api.store.tx() as tx:
        assert tx.conn.execute(text("SELECT used_at FROM sign_in_links")).scalar() is None


def test_unknown_and_malformed_codes_are_refused_without_an_error(api: Api) -> None:
    unknown, _sha = issue_sign_in_code()
    for code in (unknown, "x", "%00", "ü" * 43, "a" * 43 + "%0A", "a" * 500):
        answer = api.client.get(f"/ui/sign-in/{code}", follow_redirects=False)
        assert answer.status_code == 404, (code, answer.status_code)
        assert "not valid" in answer.text and "set-cookie" not in answer.headers


def test_a_link_of_a_revoked_token_is_refused(api: Api) -> None:
    code, token_id = _link(api)
    with api.store.tx() as tx:
        assert tokens_revoke(tx.conn, token_id)
    answer = api.client.get(f"/ui/sign-in/{code}", follow_redirects=False)
    assert answer.status_code == 410 and "revoked" in answer.text


def test_the_mark_and_the_session_token_commit_together(api: Api) -> None:
    """A use whose transaction rolls back leaves the link usable and creates no token."""
    code, _token_id = _link(api)
    with pytest.raises(RuntimeError), api.store.tx() as tx:
        assert isinstance(sign_in_links_use(tx.conn, code), SignedIn)
        raise RuntimeError("the answer could not be sent")
    with api.store.tx() as tx:
        assert not [t for t in tokens_list(tx.conn) if t.name == SIGN_IN_LINK_NAME]
        assert isinstance(sign_in_links_use(tx.conn, code), SignedIn)


def test_the_code_reaches_no_log_line(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    install_access_log_redaction()
    code, _token_id = _link(api)
    caplog.set_level(logging.INFO)
    api.client.get(f"/ui/sign-in/{code}")
    api.client.get(f"/ui/sign-in/{code}")
    # The record uvicorn's access log writes for each request (h11_impl / httptools_impl).
    access = logging.getLogger("uvicorn.access")
    for path in (f"/ui/sign-in/{code}", f"/ui/sign-in/{code}?next=/ui/"):
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", path, "1.1", 303)
    # The API's own lines: the test client's (httpx's) log is the browser's side, not the API's.
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(("duetime", "uvicorn"))]
    assert not [line for line in lines if code in line]
    assert f'127.0.0.1:5000 - "GET {REDACTED_PATH} HTTP/1.1" 303' in lines
    assert any(line.startswith("dashboard.signed_in_by_link token_id=") for line in lines)
    assert "dashboard.sign_in_link_refused reason=used" in lines
