"""The Kafka fast path, planned at intake: what the dispatcher itself will emit at the due instant.

A Kafka-target job ("emit this event at T") needs no worker: the dispatcher can produce the job's
record onto the job's own topic at T, and record the success in PostgreSQL afterwards, in
batches. So that T costs only the produce, everything else happens when the record is read,
before T: the Avro value is decoded, the topic is checked, and the record to emit, with the
idempotency headers a worker would give it (:mod:`duetime.bus.target_records`), is built. Its
fencing token is the fast path's own (:func:`duetime.fencing.emitted_token`): one below what a
worker executing the same attempt would send, so a run the fast path gives up to a worker reaches
the target with a higher token.

A record that cannot take the fast path is simply forwarded to ``runs.ready`` like any run, and a
worker executes it as before: a refused topic (the worker ends the run as ``dead`` with the
reason), a value that does not decode or that disagrees with its routing headers.

Pure: no clock, no driver.
"""

from __future__ import annotations

from dataclasses import dataclass

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import RunDecoder
from duetime.bus.target_records import kafka_headers, topic_refusal
from duetime.errors import CodecError
from duetime.fencing import emitted_token
from duetime.model import KafkaTarget, RunEvent

from .routing import Routed

__all__ = ["Emission", "plan_emission"]


@dataclass(frozen=True, slots=True)
class Emission:
    """The job's record, ready to produce: nothing is left to compute at the due instant."""

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    #: The run it executes, for the database write and the result record after the ack.
    run: RunEvent


def plan_emission(
    routed: Routed, reserved_prefix: str, decoder: RunDecoder | None = None
) -> tuple[Routed, str | None]:
    """``routed`` with its :class:`Emission` when it can take the fast path.

    Returns the (possibly unchanged) record and, when a Kafka-kind record cannot take the fast
    path, why not (it then goes to ``runs.ready``). ``decoder``: the dispatcher's own, which
    decodes each job's part of the records once (a full Avro decode per run was a third of the
    intake's time); without one, the codec decodes the whole record.
    """
    if routed.target_kind != "kafka":
        return routed, None
    run = routed.run
    if run is None:
        try:
            decode = RUN_EVENTS.decode if decoder is None else decoder.decode
            run = decode(routed.value, routed.headers)
        except CodecError as exc:
            return routed, str(exc)
    target = run.target
    if not isinstance(target, KafkaTarget):
        return routed, "the routing headers say kafka, the value does not"
    if (run.run_id, run.attempt) != (routed.run_id, routed.attempt):
        return routed, "the routing headers and the value name different runs"
    refusal = topic_refusal(target.topic, reserved_prefix)
    if refusal is not None:
        return routed, refusal
    emission = Emission(
        topic=target.topic,
        key=target.key.encode("utf-8") if target.key is not None else None,
        value=target.value.encode("utf-8"),
        headers=kafka_headers(
            run.run_id, run.attempt, emitted_token(run.attempt), run.scheduled_for
        ),
        run=run,
    )
    return routed.with_emission(emission), None
