"""Signed alert deliveries: how duetime signs a webhook body and how a receiver verifies it. Pure.

Every alert POST carries::

    X-Duetime-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">

The timestamp is inside the MAC, so a captured delivery cannot be replayed later than the
receiver's tolerance (five minutes by default) with a fresh timestamp; the body is the exact bytes
sent, so any change to it breaks the MAC. A receiver verifies with :func:`verify` (or the same
five steps in any language): split the header on ``,`` into ``key=value`` pairs; take ``t`` and
every ``v1``; reject a ``t`` further than the tolerance from its own clock; compute
HMAC-SHA256(secret, ``t`` + ``.`` + raw body) in hex; accept if it equals any ``v1`` under a
constant-time comparison. Several ``v1`` values are allowed so a sender can sign with an old and
a new secret while receivers move over.

Secrets: alerts to the operator's webhook are signed with the operator's secret
(``DUETIME_ALERT_SECRET``). Alerts to a tenant's own webhook are signed with that tenant's key,
:func:`tenant_secret`, derived from the operator's secret, so each tenant can verify its own alerts
and none can forge another tenant's (or the operator's), and no per-tenant secret is stored.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta

from duetime.errors import DuetimeError

__all__ = [
    "DEFAULT_TOLERANCE",
    "SIGNATURE_HEADER",
    "SignatureError",
    "sign",
    "tenant_secret",
    "verify",
]

SIGNATURE_HEADER = "X-Duetime-Signature"
DEFAULT_TOLERANCE = timedelta(minutes=5)
_TENANT_KEY_LABEL = b"duetime-alert-tenant-v1:"
_MAX_HEADER = 1024


class SignatureError(DuetimeError):
    """A delivery whose signature is missing, malformed, stale or wrong."""


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(body: bytes, secret: str, at: datetime) -> str:
    """The ``X-Duetime-Signature`` value for ``body`` sent at ``at`` (an aware instant)."""
    if not secret:
        raise ValueError("an empty secret signs nothing")
    timestamp = int(at.timestamp())
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def verify(
    header: str | None,
    body: bytes,
    secret: str,
    now: datetime,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> None:
    """Check a delivery's signature header against its raw body; raise ``SignatureError`` if bad.

    Args:
        header: The ``X-Duetime-Signature`` value as received (None if absent).
        body: The request body exactly as received, before any JSON parsing.
        secret: The operator's secret, or the tenant's key from :func:`tenant_secret`.
        now: The receiver's clock (aware).
        tolerance: How far the signed timestamp may be from ``now``, either way.
    """
    if not secret:
        raise ValueError("an empty secret verifies nothing")
    if not header:
        raise SignatureError("no signature header")
    if len(header) > _MAX_HEADER:
        raise SignatureError("signature header too long")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError("malformed signature header")
        if key == "t":
            if timestamp is not None or not value.isascii() or not value.isdigit():
                raise SignatureError("malformed signature timestamp")
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureError("signature header lacks t or v1")
    if abs(now.timestamp() - timestamp) > tolerance.total_seconds():
        raise SignatureError("signature timestamp outside the tolerance")
    expected = _mac(secret, timestamp, body)
    # Compare against every candidate, so the time taken does not say which one matched.
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(expected.encode(), candidate.encode())
    if not matched:
        raise SignatureError("signature does not match")


def tenant_secret(master: str, tenant: str) -> str:
    """The key that signs alerts to ``tenant``'s own webhook: HMAC-SHA256(master, label + tenant).

    The operator hands it to the tenant (``duetime alerts key --tenant NAME`` prints it). Changing
    the operator's secret changes every tenant's key.
    """
    if not master:
        raise ValueError("no operator secret to derive a tenant key from")
    label = _TENANT_KEY_LABEL + tenant.encode()
    return hmac.new(master.encode(), label, hashlib.sha256).hexdigest()
