"""Routing headers on run records, so a stage that only routes never decodes the Avro value.

The planner writes these headers on every record of ``runs.due.*`` (and the dispatcher forwards
them, bytes untouched, onto ``runs.ready``):

==========================  ===========================================================
``duetime-run-id``          the run's UUID, ASCII, in its canonical form (lowercase hex, hyphens)
``duetime-attempt``         the attempt the record asks for, ASCII decimal
``duetime-due-at-ms``       when to release it: Unix epoch milliseconds, ASCII decimal, rounded
                            *up* to the next whole millisecond, so that a router that works in
                            milliseconds never releases a run before its due instant
``duetime-target-kind``     ``http`` or ``kafka``
``duetime-sent-at-ms``      the planner's *database clock* (``now()``) when it published, in
                            epoch ms: a dispatcher compares it with its own clock to measure
                            (and correct) its offset from the database clock
``duetime-target``          the run's target_service (UTF-8): the dispatcher's throttling key
``duetime-tenant``          the run's tenant: the fairness key inside a throttled target
``duetime-catch-up``        ``1`` on a run planned after its time (missed in an outage): the
                            dispatcher drains such runs at the ``@catch-up`` rate
==========================  ===========================================================

plus the schema fingerprint header ``duetime-schema`` of :mod:`duetime.bus.codec`. The Avro value
stays the contract; the headers are a copy of some of its fields for routers. A record without
them (an older planner) is still valid: readers fall back to decoding the value.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

__all__ = [
    "ATTEMPT",
    "CATCH_UP",
    "DUE_AT_MS",
    "RELEASED_AT_MS",
    "RUN_ID",
    "SENT_AT_MS",
    "TARGET",
    "TARGET_KIND",
    "TENANT",
    "THROTTLED_MS",
    "RunRouting",
    "epoch_ms",
    "epoch_ms_ceil",
    "from_epoch_ms",
    "read_release",
    "read_routing",
    "routing_headers",
]

RUN_ID = "duetime-run-id"
ATTEMPT = "duetime-attempt"
DUE_AT_MS = "duetime-due-at-ms"
TARGET_KIND = "duetime-target-kind"
SENT_AT_MS = "duetime-sent-at-ms"
TARGET = "duetime-target"
TENANT = "duetime-tenant"
CATCH_UP = "duetime-catch-up"
# Added by the dispatcher on runs.ready: when it released the run (database clock, epoch ms)
# and how long throttling held it; the worker's claim records both on the run.
RELEASED_AT_MS = "duetime-released-at-ms"
THROTTLED_MS = "duetime-throttled-ms"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CATCH_UP_HEADER: tuple[str, bytes] = (CATCH_UP, b"1")
#: ``str(uuid)``'s form: a run id header in any other spelling does not route.
_CANONICAL_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class RunRouting(NamedTuple):
    """What a router needs to know about a run record without decoding it (a named tuple: one
    is made per record read, and a frozen dataclass costs several times as much to make).

    ``run_key`` is the run id as the header carries it, the ASCII of its canonical text: a
    router keys, compares and forwards those bytes, and a ``uuid.UUID`` (parsing, hashing and
    formatting it again cost more than the rest of the headers) is made only when asked for.
    """

    run_key: bytes
    attempt: int
    due_at_ms: int
    target_kind: str
    sent_at_ms: int | None
    target_service: str | None = None  # None: an older record without the header
    tenant: str | None = None
    catch_up: bool = False

    @property
    def run_id(self) -> uuid.UUID:
        return uuid.UUID(self.run_key.decode("ascii"))


def epoch_ms(instant: datetime) -> int:
    """Milliseconds since the Unix epoch (exact integer arithmetic, no float rounding)."""
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def epoch_ms_ceil(instant: datetime) -> int:
    """Milliseconds since the Unix epoch, rounded up: never earlier than ``instant``."""
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 - (-delta.microseconds // 1000)


def from_epoch_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def routing_headers(
    run_id: uuid.UUID,
    attempt: int,
    due_at: datetime,
    target_kind: str,
    sent_at: datetime,
    *,
    target_service: str | None = None,
    tenant: str | None = None,
    catch_up: bool = False,
) -> list[tuple[str, str | bytes | None]]:
    """The routing headers for one run record (append the schema header yourself); the target
    and tenant headers only when given (the planner always gives them)."""
    headers: list[tuple[str, str | bytes | None]] = [
        (RUN_ID, str(run_id).encode("ascii")),
        (ATTEMPT, str(attempt).encode("ascii")),
        (DUE_AT_MS, str(epoch_ms_ceil(due_at)).encode("ascii")),
        (TARGET_KIND, target_kind.encode("ascii")),
        (SENT_AT_MS, str(epoch_ms(sent_at)).encode("ascii")),
    ]
    if target_service is not None:
        headers.append((TARGET, target_service.encode()))
    if tenant is not None:
        headers.append((TENANT, tenant.encode()))
    if catch_up:
        headers.append(_CATCH_UP_HEADER)
    return headers


class RoutingHeaders:
    """``routing_headers`` for many records sent at one instant, the shared parts encoded once
    (the planner's publishing hot path); the same headers in the same order."""

    __slots__ = ("_due", "_leading", "_sent")

    def __init__(
        self, sent_at: datetime, leading: Sequence[tuple[str, str | bytes | None]] = ()
    ) -> None:
        self._leading = tuple(leading)
        self._sent: tuple[str, bytes] = (SENT_AT_MS, str(epoch_ms(sent_at)).encode("ascii"))
        # The due header of each due instant met: a batch's runs share a few.
        self._due: dict[datetime, tuple[str, bytes]] = {}

    def for_run(
        self,
        run_id: str,
        attempt: int,
        due_at: datetime,
        target_kind: str,
        *,
        target: tuple[str, bytes],
        tenant: tuple[str, bytes],
        catch_up: bool = False,
    ) -> list[tuple[str, str | bytes | None]]:
        """``leading`` followed by the routing headers; ``run_id`` in its canonical text form,
        ``target`` and ``tenant`` as made by :meth:`job_headers` (once per job)."""
        headers: list[tuple[str, str | bytes | None]] = [
            *self._leading,
            (RUN_ID, run_id.encode("ascii")),
            (ATTEMPT, str(attempt).encode("ascii")),
            self._due_header(due_at),
            (TARGET_KIND, target_kind.encode("ascii")),
            self._sent,
            target,
            tenant,
        ]
        if catch_up:
            headers.append(_CATCH_UP_HEADER)
        return headers

    def _due_header(self, due_at: datetime) -> tuple[str, bytes]:
        """Remembered for UTC instants only: in one zone, the two 01:30 of a DST overlap
        (``fold`` 0 and 1) are equal datetimes and hash alike, yet are an hour apart."""
        if due_at.tzinfo is not UTC:
            return (DUE_AT_MS, str(epoch_ms_ceil(due_at)).encode("ascii"))
        header = self._due.get(due_at)
        if header is None:
            header = self._due[due_at] = (DUE_AT_MS, str(epoch_ms_ceil(due_at)).encode("ascii"))
        return header

    @staticmethod
    def job_headers(
        target_service: str, tenant: str
    ) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
        """The target and tenant headers of a job's runs."""
        return (TARGET, target_service.encode()), (TENANT, tenant.encode())


def read_release(
    headers: Sequence[tuple[str, bytes | None]] | None,
) -> tuple[datetime | None, int | None]:
    """(released_at, throttled_ms) as the dispatcher stamped them; None where missing or bad."""
    released: datetime | None = None
    throttled: int | None = None
    for key, value in headers or ():
        if value is None:
            continue
        try:
            if key == RELEASED_AT_MS:
                released = from_epoch_ms(int(value))
            elif key == THROTTLED_MS:
                throttled = max(0, int(value))
        except (ValueError, OverflowError, OSError):
            continue
    return released, throttled


def read_routing(headers: Sequence[tuple[str, bytes | None]] | None) -> RunRouting | None:
    """The routing headers of a record, or None when any required one is missing or malformed
    (a header repeated counts with its last value, as a missing one when that is null)."""
    # One dict built in C: a dispatcher reads every due record's headers at intake.
    found: dict[str, bytes | None] = dict(headers or ())
    run_raw, attempt_raw = found.get(RUN_ID), found.get(ATTEMPT)
    due_raw, kind_raw = found.get(DUE_AT_MS), found.get(TARGET_KIND)
    if run_raw is None or attempt_raw is None or due_raw is None or kind_raw is None:
        return None
    if _CANONICAL_UUID.fullmatch(run_raw) is None:
        return None
    try:
        attempt = int(attempt_raw)
        due_at_ms = int(due_raw)
        kind = kind_raw.decode("ascii")
        sent = found.get(SENT_AT_MS)
        sent_at_ms = int(sent) if sent is not None else None
        target = found.get(TARGET)
        tenant = found.get(TENANT)
        target_service = target.decode() if target is not None else None
        tenant_name = tenant.decode() if tenant is not None else None
        catch_up = found.get(CATCH_UP) == b"1"
    except (ValueError, UnicodeDecodeError):
        return None
    if attempt < 1 or kind not in ("http", "kafka"):
        return None
    return RunRouting(
        run_raw, attempt, due_at_ms, kind, sent_at_ms, target_service, tenant_name, catch_up
    )
