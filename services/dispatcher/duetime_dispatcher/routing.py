"""What the dispatcher holds of a due record: its routing, and the bytes it forwards untouched.

The planner puts routing headers on every record of ``runs.due.*``
(:mod:`duetime.bus.run_headers`): run id, attempt, due instant, target kind and its
database-clock send time. Routing from them costs a few header parses per record instead of a
full Avro decode, and the record's value and headers go on to ``runs.ready`` byte for byte. A
record without valid routing headers (an older planner, a hand-made record) is decoded as a
``RunEvent`` instead; a record that has neither is poison and raises :class:`CodecError`.

Pure: no clock, no driver.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_headers import from_epoch_ms, read_routing
from duetime.errors import CodecError
from duetime.model import KafkaTarget, RunEvent

if TYPE_CHECKING:
    from .fast_path import Emission

__all__ = ["Headers", "Routed", "RunKey", "route_record"]

#: Record headers as the Kafka clients hand them over.
Headers = Sequence[tuple[str, bytes | None]]

#: (run id as the ASCII bytes of its UUID, attempt): one attempt of one run, the unit of
#: de-duplication. Bytes rather than a ``uuid.UUID``, whose ``__hash__`` is Python code: a spike
#: hashes each key several times at the due instant.
RunKey = tuple[bytes, int]


@dataclass(frozen=True, slots=True)
class Routed:
    """One due record, reduced to what routing needs plus the bytes to forward.

    Attributes:
        due_at: when to release it, on the planner's database clock.
        target_kind: ``http`` or ``kafka``.
        value: the record's Avro value as read, forwarded untouched.
        headers: the record's headers as read (schema fingerprint and routing), forwarded too.
        sent_at_ms: the planner's database clock when it published the record (epoch ms), for
            the clock offset estimate; None when the record carries no such header.
        ready_key: the key on ``runs.ready`` (the run id), computed before the due instant.
        run: the decoded value, when the record had to be decoded (no routing headers).
        emission: for a Kafka target on the fast path, the job's record to emit at the due
            instant instead of forwarding this one (:mod:`duetime_dispatcher.fast_path`).
        target_service: the throttling key (None: an older record without the header).
        tenant: the fairness key inside a throttled target.
        catch_up: planned after its time: drained at the ``@catch-up`` rate first.
    """

    run_id: uuid.UUID
    attempt: int
    due_at: datetime
    target_kind: str
    value: bytes
    headers: Headers
    ready_key: bytes
    sent_at_ms: int | None = None
    run: RunEvent | None = None
    emission: Emission | None = None
    target_service: str | None = None
    tenant: str | None = None
    catch_up: bool = False

    @property
    def key(self) -> RunKey:
        return (self.ready_key, self.attempt)

    def with_emission(self, emission: Emission) -> Routed:
        """This record with its fast-path emission (``dataclasses.replace`` does the same at
        twice the cost, and the intake does it for every Kafka-target record)."""
        return Routed(
            self.run_id,
            self.attempt,
            self.due_at,
            self.target_kind,
            self.value,
            self.headers,
            self.ready_key,
            self.sent_at_ms,
            self.run,
            emission,
            self.target_service,
            self.tenant,
            self.catch_up,
        )


def route_record(value: bytes | None, headers: Headers) -> Routed:
    """Route a due record from its headers, or from its decoded value when they are missing.

    Raises:
        CodecError: the record has no value, or neither valid routing headers nor a value that
            decodes as a RunEvent.
    """
    if value is None:
        raise CodecError("empty record (null value)")
    routing = read_routing(headers)
    if routing is not None:
        return Routed(
            routing.run_id,
            routing.attempt,
            from_epoch_ms(routing.due_at_ms),
            routing.target_kind,
            value,
            headers,
            str(routing.run_id).encode("ascii"),
            routing.sent_at_ms,
            target_service=routing.target_service,
            tenant=routing.tenant,
            catch_up=routing.catch_up,
        )
    run = RUN_EVENTS.decode(value, headers)
    kind = "kafka" if isinstance(run.target, KafkaTarget) else "http"
    key = str(run.run_id).encode("ascii")
    return Routed(
        run.run_id,
        run.attempt,
        run.due_at,
        kind,
        value,
        headers,
        key,
        None,
        run,
        target_service=run.target_service,
        tenant=run.tenant,
    )
