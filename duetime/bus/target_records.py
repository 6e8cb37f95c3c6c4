"""The record a Kafka-target job receives: its idempotency headers and which topics it may use.

Whoever emits a Kafka target's record (a worker, or the dispatcher's fast path) must give it the
same headers, because execution is at-least-once and the job's consumers deduplicate on them:
``Idempotency-Key: <run_id>:<attempt>``, ``X-Duetime-Run-Id``, ``X-Duetime-Attempt``,
``X-Duetime-Fencing-Token`` (:mod:`duetime.fencing` says which token each path gives) and
``X-Duetime-Scheduled-For`` (ISO-8601 UTC with ``Z``), as UTF-8 record headers.

Topics under duetime's own prefix, and Kafka's internal ``__`` topics, are refused: a job that
could write onto ``duetime.runs.ready`` could forge run events for other tenants. The names that
are duetime's own under an empty prefix (``jobs``, ``jobs.*``, ``runs.*``) are refused already
by job validation, whatever the prefix (``reserved_topic``).

Pure: no driver.
"""

from __future__ import annotations

import functools
import re
import uuid
from datetime import UTC, datetime

__all__ = [
    "ATTEMPT",
    "FENCING_TOKEN",
    "IDEMPOTENCY_KEY",
    "RUN_ID",
    "SCHEDULED_FOR",
    "duetime_headers",
    "format_instant",
    "kafka_header_values",
    "kafka_headers",
    "reserved_topic",
    "topic_refusal",
]

IDEMPOTENCY_KEY = "Idempotency-Key"
RUN_ID = "X-Duetime-Run-Id"
ATTEMPT = "X-Duetime-Attempt"
FENCING_TOKEN = "X-Duetime-Fencing-Token"
SCHEDULED_FOR = "X-Duetime-Scheduled-For"

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def format_instant(instant: datetime) -> str:
    """ISO-8601 in UTC with a ``Z`` (``2026-03-29T01:30:00Z``), microseconds only if present."""
    if instant.tzinfo is None:
        raise ValueError("instant must be timezone-aware")
    text = instant.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def duetime_headers(
    run_id: uuid.UUID, attempt: int, fencing_token: int, scheduled_for: datetime
) -> list[tuple[str, str]]:
    """The idempotency and fencing headers, identical for HTTP and Kafka targets."""
    run = str(run_id)
    return [
        (IDEMPOTENCY_KEY, f"{run}:{attempt}"),
        (RUN_ID, run),
        (ATTEMPT, str(attempt)),
        (FENCING_TOKEN, str(fencing_token)),
        (SCHEDULED_FOR, _formatted(scheduled_for)),
    ]


def _formatted(instant: datetime) -> str:
    """``format_instant``, once per instant for the recent ones: a spike's runs (the dispatcher
    builds their headers as it reads them) share a handful of scheduled instants."""
    text = _FORMATTED.get(instant)
    if text is None:
        if len(_FORMATTED) >= 4096:
            _FORMATTED.clear()
        text = _FORMATTED[instant] = format_instant(instant)
    return text


_FORMATTED: dict[datetime, str] = {}


def kafka_headers(
    run_id: uuid.UUID, attempt: int, fencing_token: int, scheduled_for: datetime
) -> list[tuple[str, bytes]]:
    """The idempotency and fencing headers as Kafka record headers (UTF-8 values): the same
    names and values as :func:`duetime_headers`, built as bytes directly."""
    return kafka_header_values(
        str(run_id).encode("ascii"),
        attempt,
        fencing_token,
        _formatted(scheduled_for).encode("ascii"),
    )


def kafka_header_values(
    run: bytes, attempt: int, fencing_token: int, scheduled_for: bytes
) -> list[tuple[str, bytes]]:
    """:func:`kafka_headers` from the run id's canonical text and the formatted scheduled
    instant (:func:`format_instant`), as bytes: the dispatcher's fast path builds one set per
    record it reads and has both at hand."""
    count = str(attempt).encode("ascii")
    return [
        (IDEMPOTENCY_KEY, run + b":" + count),
        (RUN_ID, run),
        (ATTEMPT, count),
        (FENCING_TOKEN, str(fencing_token).encode("ascii")),
        (SCHEDULED_FOR, scheduled_for),
    ]


@functools.lru_cache(maxsize=4096)
def topic_refusal(topic: str, reserved_prefix: str) -> str | None:
    """Why ``topic`` may not be a job's target in a deployment whose topics are under
    ``reserved_prefix``, or None if it may. What the worker and the dispatcher's fast path check
    before they produce, behind the validation's ``reserved_topic``. Remembered per (topic,
    prefix): they check every run, and a job's runs all name the same topic."""
    if not reserved_prefix:
        return reserved_topic(topic)
    why = _not_a_user_topic(topic)
    if why is None and topic.startswith(reserved_prefix):
        why = f"topic {topic!r} is internal to duetime (prefix {reserved_prefix!r})"
    return why


def reserved_topic(topic: str) -> str | None:
    """Why ``topic`` may never be a job's target, whatever the topic prefix, or None.

    Job validation (``duetime.jobdef.validate_job``, one check for job files, the API and the
    jobs topic) knows no topic prefix, and a definition may be applied to another deployment; so
    it refuses, everywhere, the names that are duetime's own when the prefix is empty: ``jobs``,
    ``jobs.*`` (``jobs.rejected``) and ``runs.*``. A job could otherwise forge job definitions or
    run events for other tenants. Topics under a non-empty prefix are refused where the prefix
    is known: at execution (``topic_refusal``).
    """
    why = _not_a_user_topic(topic)
    if why is None and (topic == "jobs" or topic.startswith(("jobs.", "runs."))):
        why = (
            f"topic {topic!r} is one of duetime's own topics when the topic prefix is empty "
            "(jobs, jobs.*, runs.*)"
        )
    return why


def _not_a_user_topic(topic: str) -> str | None:
    if not _TOPIC.match(topic) or topic in (".", ".."):
        return f"invalid topic name {topic!r}"
    if topic.startswith("__"):
        return f"topic {topic!r} is internal to Kafka"
    return None
