"""Domain records shared by every service: frozen dataclasses, never dicts.

Codecs (Avro on Kafka, rows in PostgreSQL) convert to and from these at the boundary.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Literal

from duetime.schedule import RetryPolicy, ScheduleSpec

__all__ = [
    "RUN_ID_NAMESPACE",
    "TERMINAL_STATES",
    "HeaderValue",
    "HttpTarget",
    "JobDefinition",
    "KafkaTarget",
    "RunEvent",
    "RunState",
    "SecretRef",
    "Target",
    "run_id_for",
]

# Fixed namespace so that run_id = uuid5(namespace, "<job_id>|<scheduled_for in epoch µs>")
# is the same on every planner, every restart and in every language with a UUIDv5 implementation.
RUN_ID_NAMESPACE = uuid.UUID("6f1c9a44-3d0e-5b7f-9c1a-2d8e4b6a0f35")


class RunState(StrEnum):
    """The run state machine (docs/runs.md draws it).

    scheduled -> running -> succeeded
                         -> scheduled (retry after backoff, attempt kept, re-published)
                         -> dead (attempts exhausted or non-retryable)
    running --lease expired (reaper)--> scheduled | dead
    """

    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


TERMINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED, RunState.SKIPPED}
)


_RUN_ID_SHA1 = hashlib.sha1(RUN_ID_NAMESPACE.bytes, usedforsecurity=False)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# RFC 4122 version 5: the version nibble and the variant bits set over the SHA-1's first 16 bytes.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (5 << 76) | (0x8000 << 48)


def run_id_for(job_id: str, scheduled_for: datetime) -> uuid.UUID:
    """Deterministic run id: the same occurrence always gets the same id.

    ``uuid.uuid5(RUN_ID_NAMESPACE, f"{job_id}|{µs since the epoch}")``, computed without
    ``uuid5``'s per-call overhead (the namespace's hash state is copied, the UUID built from its
    integer): the planner computes one per run, and this was a fifth of its CPU. A unit test holds
    it equal to ``uuid.uuid5``.
    """
    # Integer arithmetic on the timedelta avoids float rounding for far-future instants.
    delta = scheduled_for - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    digest = _RUN_ID_SHA1.copy()
    digest.update(f"{job_id}|{micros}".encode())
    value = (int.from_bytes(digest.digest()[:16]) & _UUID5_CLEAR) | _UUID5_SET
    run_id = object.__new__(uuid.UUID)
    object.__setattr__(run_id, "int", value)
    object.__setattr__(run_id, "is_safe", uuid.SafeUUID.unknown)
    return run_id


@dataclass(frozen=True)
class SecretRef:
    """A header value the worker fills in at call time: ``prefix`` + the secret ``name``'s value.

    Only the name is stored and travels on the topics; the value lives with the workers
    (``duetime.credentials`` has the rules, docs/targets.md "Secrets" the why).
    """

    name: str
    prefix: str = ""


#: A job header's value: a literal, or a reference to a secret the worker holds.
HeaderValue = str | SecretRef


@dataclass(frozen=True)
class HttpTarget:
    """Call an HTTP endpoint. 2xx = success; 4xx is final except 408 and 429."""

    url: str
    method: str = "POST"
    headers: tuple[tuple[str, HeaderValue], ...] = ()
    body: str | None = None
    timeout: timedelta = timedelta(seconds=30)
    kind: Literal["http"] = "http"


@dataclass(frozen=True)
class KafkaTarget:
    """Emit one record onto a user topic."""

    topic: str
    value: str
    key: str | None = None
    kind: Literal["kafka"] = "kafka"


Target = HttpTarget | KafkaTarget


@dataclass(frozen=True)
class JobDefinition:
    """A validated job: what to run, when, and how hard to try."""

    job_id: str
    schedule: ScheduleSpec
    target: Target
    target_service: str
    tenant: str = "default"
    window: timedelta = timedelta(0)
    catch_up: Literal["once", "all", "skip"] = "once"
    max_catch_up: int = 100
    overlap: Literal["allow", "skip", "buffer_one"] = "allow"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    lease: timedelta = timedelta(seconds=60)
    heartbeat_interval: timedelta = timedelta(seconds=20)
    paused: bool = False
    version: int = 1


@dataclass(frozen=True)
class RunEvent:
    """One attempt of one run, as it travels planner -> dispatcher -> workers.

    ``attempt`` is the attempt this message asks a worker to start (1 for the first); the worker's
    claim succeeds only if the run is still ``scheduled`` with ``attempt - 1`` attempts behind it,
    so a duplicate message finds nothing to claim.
    """

    run_id: uuid.UUID
    job_id: str
    tenant: str
    scheduled_for: datetime
    due_at: datetime
    attempt: int
    max_attempts: int
    target_service: str
    target: Target
    lease: timedelta
    heartbeat_interval: timedelta
    retry: RetryPolicy = field(default_factory=RetryPolicy)
