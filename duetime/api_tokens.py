"""API bearer tokens: how they look, how they are checked (pure: no I/O, no driver).

A token is ``dt_<token_id>_<secret>``: ``token_id`` is 12 characters of ``a-z0-9`` that name the
token in listings and in ``duetime tokens revoke``; ``secret`` is 32 random bytes (256 bits, from
``secrets``) in URL-safe base64. Only ``sha256(token)`` is stored: with that much entropy a plain
hash cannot be reversed or guessed, so no slow password hash is needed. A request's token is found
by its ``token_id`` and accepted only if its hash matches the stored one, compared in constant
time (``hmac.compare_digest``), so the time a check takes says nothing about the stored hash.

The token text never goes into a log line, an error message or the database.

A dashboard sign-in code (``duetime up``'s one-time link, ``duetime.store.sign_in_links``) is 32
random bytes in URL-safe base64 as well, stored as its SHA-256 for the same reason.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass

__all__ = [
    "TOKEN_ID_PATTERN",
    "IssuedToken",
    "issue_sign_in_code",
    "issue_token",
    "matches",
    "parse_token",
    "sign_in_code_sha256",
    "token_sha256",
]

TOKEN_ID_PATTERN = re.compile(r"^[a-z0-9]{12}$")
_TOKEN = re.compile(r"^dt_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$")
_SIGN_IN_CODE = re.compile(r"[A-Za-z0-9_-]{43}")
_ID_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class IssuedToken:
    """A new token: ``token`` is shown once; ``token_id`` and ``sha256`` are what is stored."""

    token_id: str
    token: str
    sha256: bytes

    def __repr__(self) -> str:  # never print the secret by accident
        return f"IssuedToken(token_id={self.token_id!r})"


def token_sha256(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


def issue_token() -> IssuedToken:
    token_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
    token = f"dt_{token_id}_{secrets.token_urlsafe(32)}"
    return IssuedToken(token_id, token, token_sha256(token))


def parse_token(token: str) -> str | None:
    """The token_id of a well-formed token, else None (without saying what is wrong with it)."""
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def matches(token: str, stored_sha256: bytes) -> bool:
    """Whether ``token`` hashes to ``stored_sha256``, compared in constant time."""
    return hmac.compare_digest(token_sha256(token), bytes(stored_sha256))


def issue_sign_in_code() -> tuple[str, bytes]:
    """A new one-time sign-in code and its SHA-256 (what is stored)."""
    code = secrets.token_urlsafe(32)
    return code, hashlib.sha256(code.encode("ascii")).digest()


def sign_in_code_sha256(code: str) -> bytes | None:
    """The SHA-256 of a well-formed sign-in code, None for anything else (a URL brings any text)."""
    if not _SIGN_IN_CODE.fullmatch(code):
        return None
    return hashlib.sha256(code.encode("ascii")).digest()
