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


@dataclass(slots=True)
class Routed:
    """One due record, reduced to what routing needs plus the bytes to forward.

    Not frozen, for speed (one is made per record read; a frozen dataclass's ``__init__`` costs
    several times as much, and a copy to add the emission as much again): the fast path sets
    ``emission`` at intake, before the record is held (:mod:`duetime_dispatcher.fast_path`);
    from then on nothing assigns to it, and a changed record is a new one
    (``dataclasses.replace``).

    Attributes:
        ready_key: the run id as the ASCII of its canonical text: the run's key on
            ``runs.ready`` and, with the attempt, its de-duplication key. The ``uuid.UUID``
            (:attr:`run_id`) is made only when asked for.
        due_at: when to release it, on the planner's database clock.
        target_kind: ``http`` or ``kafka``.
        value: the record's Avro value as read, forwarded untouched.
        headers: the record's headers as read (schema fingerprint and routing), forwarded too.
        sent_at_ms: the planner's database clock when it published the record (epoch ms), for
            the clock offset estimate; None when the record carries no such header.
        run: the decoded value, when the record had to be decoded (no routing headers).
        emission: for a Kafka target on the fast path, the job's record to emit at the due
            instant instead of forwarding this one (:mod:`duetime_dispatcher.fast_path`).
        target_service: the throttling key (None: an older record without the header).
        tenant: the fairness key inside a throttled target.
        catch_up: planned after its time: drained at the ``@catch-up`` rate first.
    """

    ready_key: bytes
    attempt: int
    due_at: datetime
    target_kind: str
    value: bytes
    headers: Headers
    sent_at_ms: int | None = None
    run: RunEvent | None = None
    emission: Emission | None = None
    target_service: str | None = None
    tenant: str | None = None
    catch_up: bool = False

    @property
    def run_id(self) -> uuid.UUID:
        return uuid.UUID(self.ready_key.decode("ascii"))

    @property
    def key(self) -> RunKey:
        return (self.ready_key, self.attempt)


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
            routing.run_key,
            routing.attempt,
            from_epoch_ms(routing.due_at_ms),
            routing.target_kind,
            value,
            headers,
            routing.sent_at_ms,
            target_service=routing.target_service,
            tenant=routing.tenant,
            catch_up=routing.catch_up,
        )
    run = RUN_EVENTS.decode(value, headers)
    kind = "kafka" if isinstance(run.target, KafkaTarget) else "http"
    return Routed(
        str(run.run_id).encode("ascii"),
        run.attempt,
        run.due_at,
        kind,
        value,
        headers,
        None,
        run,
        target_service=run.target_service,
        tenant=run.tenant,
    )
