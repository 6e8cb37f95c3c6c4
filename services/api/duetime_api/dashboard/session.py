"""Signing in to the dashboard: the bearer token kept in a cookie, and CSRF protection.

The sign-in form posts a token (from ``duetime tokens create`` or ``api.json``), or ``duetime
up``'s one-time link brings a code that becomes a new token (``duetime.store.sign_in_links``);
a valid one is set as the cookie ``duetime_token``: ``HttpOnly`` (no script can read it),
``SameSite=Strict`` (no other site's page or link sends it), ``Path=/ui`` (the REST API never
takes it: ``/v1`` wants the Authorization header) and ``Secure`` when the request came over
HTTPS. It is a session cookie, gone when the browser closes, and every request checks it
against ``api_tokens`` like a bearer token, so revoking the token ends the session at the next
click.

Writes (retry, sign-out) are forms that POST a CSRF token derived from the session's token,
HMAC-SHA256(token, "duetime-dashboard-csrf"): another site cannot know it, and a request whose
``Origin`` header names another origin is refused as well. SameSite=Strict alone would already
keep the cookie off a cross-site POST; the CSRF token covers browsers that ignore SameSite.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response

__all__ = [
    "COOKIE",
    "clear_cookie",
    "csrf_token",
    "form_fields",
    "same_origin",
    "session_token",
    "set_cookie",
    "valid_csrf",
]

COOKIE = "duetime_token"
_CSRF_CONTEXT = b"duetime-dashboard-csrf"
#: A form body this size is far more than a token and a CSRF field need.
MAX_FORM_BYTES = 4096


def session_token(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def set_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )


def csrf_token(token: str) -> str:
    return hmac.new(token.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def valid_csrf(token: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(token), given)


def same_origin(request: Request) -> bool:
    """False when the request says it comes from a page of another origin (or from an opaque
    one, ``null``); a request without ``Origin`` still needs the CSRF token."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin == f"{request.url.scheme}://{host}"


async def form_fields(request: Request) -> dict[str, str] | None:
    """An ``application/x-www-form-urlencoded`` body's fields (first value of each), None
    when the body is of another type or too large."""
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in parsed.items()}
