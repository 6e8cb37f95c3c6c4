"""The headers every target receives, and which user headers are not allowed through. Pure.

``Idempotency-Key: <run_id>:<attempt>`` plus ``X-Duetime-Run-Id``, ``X-Duetime-Attempt``,
``X-Duetime-Fencing-Token`` and ``X-Duetime-Scheduled-For`` are the contract (docs/targets.md):
execution is at-least-once, so a target deduplicates on them, and rejects an execution whose
fencing token is lower than one it has already seen for the run. duetime sets them itself and
drops any job-supplied header of the same name, so a job definition cannot forge another run's
key or token. Framing and hop-by-hop headers (``Host``,
``Content-Length``, ``Transfer-Encoding``, ``Connection`` ...) are dropped too: the HTTP client
owns them, and letting a job set them invites request smuggling.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import datetime

# The contract headers live in the core, shared with the dispatcher's Kafka fast path.
from duetime.async_targets import CALLBACK_TOKEN, RESUME
from duetime.bus.target_records import (
    ATTEMPT,
    FENCING_TOKEN,
    IDEMPOTENCY_KEY,
    RUN_ID,
    SCHEDULED_FOR,
    duetime_headers,
    format_instant,
    kafka_headers,
)

__all__ = [
    "RESERVED_HEADERS",
    "InvalidHeader",
    "duetime_headers",
    "format_instant",
    "http_headers",
    "kafka_headers",
]

USER_AGENT = "User-Agent"

RESERVED_HEADERS = frozenset(
    name.lower()
    for name in (
        IDEMPOTENCY_KEY,
        RUN_ID,
        ATTEMPT,
        FENCING_TOKEN,
        SCHEDULED_FOR,
        USER_AGENT,
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Upgrade",
        "Expect",
    )
)
_RESERVED_PREFIX = "x-duetime-"

# RFC 9110 §5.1 field-name = token; values must not contain CR, LF or NUL (header injection).
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


class InvalidHeader(ValueError):
    """A job-supplied header that cannot be sent; the attempt fails without retry."""


def _is_reserved(name: str) -> bool:
    lowered = name.lower()
    return lowered in RESERVED_HEADERS or lowered.startswith(_RESERVED_PREFIX)


def http_headers(
    job_headers: Iterable[tuple[str, str]],
    *,
    run_id: uuid.UUID,
    attempt: int,
    fencing_token: int,
    scheduled_for: datetime,
    user_agent: str,
    callback_token: uuid.UUID | None = None,
    resume: str | None = None,
) -> list[tuple[str, str]]:
    """The request headers: the job's own (validated, reserved names dropped), then duetime's.

    ``callback_token`` (the attempt's lease token) lets an async target report through the API;
    ``resume`` is the progress an earlier attempt reported (duetime.async_targets).

    Raises:
        InvalidHeader: A job header name is not an HTTP token, or a value contains CR/LF/NUL.
    """
    headers: list[tuple[str, str]] = []
    for name, value in job_headers:
        if not _TOKEN.match(name):
            raise InvalidHeader(f"header name {name!r} is not a valid HTTP token")
        if _BAD_VALUE.search(value):
            raise InvalidHeader(f"header {name!r} contains CR, LF or NUL")
        if not _is_reserved(name):
            headers.append((name, value))
    headers.extend(duetime_headers(run_id, attempt, fencing_token, scheduled_for))
    if callback_token is not None:
        headers.append((CALLBACK_TOKEN, str(callback_token)))
    if resume is not None:
        headers.append((RESUME, resume))
    headers.append((USER_AGENT, user_agent))
    return headers
