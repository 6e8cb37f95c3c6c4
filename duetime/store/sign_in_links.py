"""One-time dashboard sign-in links in PostgreSQL (sql/sign_in_links.sql).

``duetime up`` prints ``/ui/sign-in/<code>`` instead of a token: a terminal's output ends up in
logs and scrollback, and a code that worked once and for 15 minutes only is worth nothing there
afterwards. The link is made for one token (the admin token of ``api.json``); using it creates a
new token of the same scope, named ``dashboard sign-in link``, which becomes the session cookie
(the dashboard keeps a token in its cookie, never a server-side session). Taking the link and
marking it used happen in one transaction with the row locked, so two uses of one code cannot
both succeed. Only the code's SHA-256 is stored; the code is returned once, by
``sign_in_links_create``, and never logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import Connection

from duetime.api_tokens import IssuedToken, issue_sign_in_code, sign_in_code_sha256
from duetime.errors import InvalidInput

from .queries import query
from .tokens import Principal, tokens_create

__all__ = [
    "SIGN_IN_LINK_NAME",
    "SIGN_IN_LINK_VALID_FOR",
    "IssuedSignInLink",
    "SignInRefused",
    "SignedIn",
    "sign_in_links_create",
    "sign_in_links_use",
]

#: How long a printed link works: enough to open it from the terminal, short enough that the
#: line in a log or scrollback is dead by the time anyone else reads it.
SIGN_IN_LINK_VALID_FOR = timedelta(minutes=15)
#: The name of the session tokens that links become (``duetime tokens list`` shows them).
SIGN_IN_LINK_NAME = "dashboard sign-in link"


@dataclass(frozen=True)
class IssuedSignInLink:
    """A new link's code (shown once, in the URL) and when it stops working."""

    code: str
    expires_at: datetime

    def __repr__(self) -> str:  # never print the code by accident
        return f"IssuedSignInLink(expires_at={self.expires_at!r})"


@dataclass(frozen=True)
class SignedIn:
    """A link used: the session token to keep in the cookie, and whom it acts as."""

    session: IssuedToken
    principal: Principal
    link_token_id: str


@dataclass(frozen=True)
class SignInRefused:
    """Why a link did not sign in (the same for every caller: it names no token)."""

    reason: Literal["unknown", "used", "expired", "revoked"]


def sign_in_links_create(
    conn: Connection, token_id: str, valid_for: timedelta = SIGN_IN_LINK_VALID_FOR
) -> IssuedSignInLink:
    """A one-time link for the token ``token_id`` (which must exist)."""
    if valid_for <= timedelta(0):
        raise InvalidInput("valid_for", "must be positive")
    code, sha256 = issue_sign_in_code()
    row = conn.execute(
        query("sign_in_links_insert"),
        {"code_sha256": sha256, "token_id": token_id, "valid_for": valid_for},
    ).one()
    return IssuedSignInLink(code, row.expires_at)


def sign_in_links_use(conn: Connection, code: str) -> SignedIn | SignInRefused:
    """Exchange a code for a new session token of its token's scope, marking it used; run it
    in the transaction that the caller commits (the mark and the new token commit together)."""
    sha256 = sign_in_code_sha256(code)
    if sha256 is None:
        return SignInRefused("unknown")
    row = conn.execute(query("sign_in_links_claim"), {"code_sha256": sha256}).first()
    if row is None:
        return _refusal(conn, sha256)
    tenant = None if row.admin else row.tenant
    session, _record = tokens_create(conn, tenant=tenant, name=SIGN_IN_LINK_NAME)
    conn.execute(
        query("sign_in_links_mark_used"),
        {"code_sha256": sha256, "session_token_id": session.token_id},
    ).one()
    return SignedIn(session, Principal(session.token_id, tenant), row.token_id)


def _refusal(conn: Connection, sha256: bytes) -> SignInRefused:
    row = conn.execute(query("sign_in_links_get"), {"code_sha256": sha256}).first()
    if row is None:
        return SignInRefused("unknown")
    if row.used:
        return SignInRefused("used")
    if row.revoked:
        return SignInRefused("revoked")
    return SignInRefused("expired")
