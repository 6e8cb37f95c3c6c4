"""API bearer tokens in PostgreSQL (sql/tokens.sql): created, looked up, revoked, listed.

Only each token's SHA-256 is stored (``duetime.api_tokens`` has why that suffices); the token
text is returned once, by ``tokens_create``, and never stored or logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from duetime.api_tokens import IssuedToken, issue_token, matches, parse_token
from duetime.errors import InvalidInput

from .queries import query

__all__ = [
    "Principal",
    "TokenRecord",
    "tokens_authenticate",
    "tokens_create",
    "tokens_list",
    "tokens_revoke",
]


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: one tenant, or the admin (``tenant`` None: every tenant)."""

    token_id: str
    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.tenant is None


@dataclass(frozen=True)
class TokenRecord:
    token_id: str
    tenant: str | None
    admin: bool
    name: str
    created_at: datetime
    revoked_at: datetime | None


def tokens_create(
    conn: Connection, *, tenant: str | None, name: str = ""
) -> tuple[IssuedToken, TokenRecord]:
    """A new token for ``tenant`` (None: an admin token); the token text is in the first item."""
    if len(name) > 200:
        raise InvalidInput("name", "is longer than 200 characters")
    issued = issue_token()
    row = conn.execute(
        query("api_tokens_insert"),
        {
            "token_id": issued.token_id,
            "tenant": tenant,
            "admin": tenant is None,
            "token_sha256": issued.sha256,
            "name": name,
        },
    ).one()
    return issued, _record(row)


def tokens_authenticate(conn: Connection, token: str) -> Principal | None:
    """The principal of a valid, unrevoked token; None for anything else (same answer for all)."""
    token_id = parse_token(token)
    if token_id is None:
        return None
    row = conn.execute(query("api_tokens_get"), {"token_id": token_id}).first()
    if row is None or not matches(token, row.token_sha256):
        return None
    return Principal(row.token_id, None if row.admin else row.tenant)


def tokens_revoke(conn: Connection, token_id: str) -> bool:
    """Revoke a token by its id; False if there is no such unrevoked token."""
    return conn.execute(query("api_tokens_revoke"), {"token_id": token_id}).first() is not None


def tokens_list(conn: Connection, tenant: str | None = None) -> list[TokenRecord]:
    return [_record(r) for r in conn.execute(query("api_tokens_list"), {"tenant": tenant})]


def _record(row: Any) -> TokenRecord:
    return TokenRecord(
        token_id=row.token_id,
        tenant=row.tenant,
        admin=bool(row.admin),
        name=row.name,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )
