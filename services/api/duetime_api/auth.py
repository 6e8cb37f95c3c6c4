"""Bearer tokens: who a request acts as (``duetime.store.tokens``, docs/api.md).

Every ``/v1`` endpoint needs ``Authorization: Bearer <token>``. The token's tenant scopes every
query; an admin token (``tenant`` None) sees every tenant and may call the operator endpoints.
No token, a malformed one, an unknown one and a revoked one get the same 401, and the token is
never written to a log line: a failed attempt is logged with the token's id at most.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from duetime.api_tokens import parse_token
from duetime.logs import event
from duetime.store import Store
from duetime.store.tokens import Principal, tokens_authenticate

from .errors import ApiError

__all__ = ["Admin", "Caller", "authenticate", "principal", "store_of"]

log = logging.getLogger("duetime.api")

_bearer = HTTPBearer(auto_error=False, description="a token from `duetime tokens create`")


def store_of(request: Request) -> Store:
    """The home cluster's store (``create_app``): tokens, sign-in links, targets; the stores of
    jobs and runs are ``routing``'s."""
    store: Store = request.app.state.store
    return store


def authenticate(request: Request, token: str) -> Principal | None:
    """The token's principal, or None (logged with the token's id at most, never the token).
    The dashboard's cookie goes through here too."""
    with store_of(request).tx() as tx:
        found = tokens_authenticate(tx.conn, token)
    if found is None:
        event(
            log,
            "api.auth_refused",
            logging.WARNING,
            token_id=parse_token(token) or "malformed",
            path=request.url.path,
        )
    return found


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "a bearer token is required (Authorization: Bearer <token>)")
    found = authenticate(request, credentials.credentials)
    if found is None:
        raise ApiError(401, "the bearer token is not valid")
    return found


def admin(caller: Annotated[Principal, Depends(principal)]) -> Principal:
    if not caller.admin:
        raise ApiError(403, "this endpoint needs an admin token")
    return caller


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
