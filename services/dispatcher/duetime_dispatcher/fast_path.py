"""The Kafka fast path, planned at intake: what the dispatcher itself will emit at the due instant.

A Kafka-target job ("emit this event at T") needs no worker: the dispatcher can produce the job's
record onto the job's own topic at T, and record the success in PostgreSQL afterwards, in
batches. So that T costs only the produce, everything else happens when the record is read,
before T: the value is read, the topic is checked, and the record to emit, with the idempotency
headers a worker would give it (:mod:`duetime.bus.target_records`), is built. Its fencing token
is the fast path's own (:func:`duetime.fencing.emitted_token`): one below what a worker
executing the same attempt would send, so a run the fast path gives up to a worker reaches the
target with a higher token.

Per record, only the value's per-run head is read (:func:`duetime.bus.run_template.read_head`):
the run id, job, tenant, instants and attempt. The rest of a RunEvent (the job's tail: target,
retry policy, lease) is the same bytes for every run of one job version; the first record with a
given tail is decoded whole by the schema's codec, which validates it, and what the emission
needs from it (topic, key and value bytes, target service, or why it cannot take the fast path)
is remembered by those bytes. A record whose head does not parse or whose tail is not known yet
is decoded whole, so a malformed record fails exactly where the codec fails. No ``RunEvent`` and
no ``uuid.UUID`` is made per record (together they were most of the intake's time at a steady
9,000 runs/s).

A record that cannot take the fast path is simply forwarded to ``runs.ready`` like any run, and a
worker executes it as before: a refused topic (the worker ends the run as ``dead`` with the
reason), a value that does not decode or that disagrees with its routing headers.

Pure: no clock, no driver.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import EPOCH, FIRST_US, LAST_US, read_head
from duetime.bus.target_records import format_instant, kafka_header_values, topic_refusal
from duetime.errors import CodecError
from duetime.fencing import emitted_token
from duetime.model import KafkaTarget, RunEvent

from .routing import Routed

__all__ = ["Emission", "EmissionPlanner"]


@dataclass(slots=True)
class Emission:
    """The job's record, ready to produce: nothing is left to compute at the due instant; and
    what the database write and the result record need of its run after the broker's ack.

    Not frozen, for speed alone (one is made per Kafka-target record read); nothing assigns to
    one once made.

    Attributes:
        run_key: the run id's canonical text, ASCII (the record's ``ready_key``).
    """

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    run_key: bytes
    attempt: int
    job_id: str
    tenant: str
    target_service: str
    scheduled_for: datetime

    @property
    def run_id(self) -> uuid.UUID:
        return uuid.UUID(self.run_key.decode("ascii"))


@dataclass(frozen=True, slots=True)
class _Job:
    """What every emission of one job version shares, from its decoded tail."""

    topic: str
    key: bytes | None
    value: bytes
    target_service: str


class EmissionPlanner:
    """Plans emissions for one dispatcher (module docstring).

    Args:
        reserved_prefix: the deployment's topic prefix: its topics are refused as targets.
        max_jobs: job tails remembered; beyond it the memory starts afresh (job versions come
            and go).
    """

    __slots__ = ("_instants", "_jobs", "_max_jobs", "_prefix")

    def __init__(self, reserved_prefix: str, max_jobs: int = 100_000) -> None:
        self._prefix = reserved_prefix
        self._max_jobs = max_jobs
        # A job's tail bytes -> its shared parts, or why its runs cannot take the fast path.
        self._jobs: dict[bytes, _Job | str] = {}
        # scheduled_for in epoch µs -> (the instant, its header text): runs share a few.
        self._instants: dict[int, tuple[datetime, bytes]] = {}

    def plan(self, routed: Routed) -> tuple[Routed, str | None]:
        """``routed`` with its :class:`Emission` when it can take the fast path.

        Returns the record, its ``emission`` set (in place: a record being read, not yet held)
        when it takes the fast path, and, when a Kafka-kind record cannot, why not (it then
        goes to ``runs.ready``)."""
        if routed.target_kind != "kafka":
            return routed, None
        if routed.run is not None:  # decoded already: a record without routing headers
            return self._from_run(routed, routed.run)
        data = routed.value
        try:
            RUN_EVENTS.check_headers(routed.headers)
            run_text, job_id, tenant, scheduled_us, due_us, attempt, tail_at = read_head(data)
        except CodecError as exc:
            return routed, str(exc)
        except (IndexError, ValueError):
            return self._decoded(routed)  # the codec says what is wrong
        job = self._jobs.get(data[tail_at:])
        if job is None:
            return self._decoded(routed, tail_at)
        if isinstance(job, str):
            return routed, job
        if run_text != routed.ready_key or attempt != routed.attempt:
            return routed, "the routing headers and the value name different runs"
        if not FIRST_US <= due_us <= LAST_US:  # unused here, but the codec would refuse it
            return self._decoded(routed)
        instant = self._instants.get(scheduled_us)
        if instant is None:
            try:
                instant = self._instant(scheduled_us)
            except OverflowError:  # beyond datetime's range: the codec says so
                return self._decoded(routed)
        return _with_emission(routed, job, run_text, attempt, job_id, tenant, *instant)

    def _decoded(self, routed: Routed, tail_at: int | None = None) -> tuple[Routed, str | None]:
        """The codec's whole decode of a record the per-run path cannot read; learns its job's
        tail (at ``tail_at``) when it decodes."""
        try:
            run = RUN_EVENTS.decode(routed.value, routed.headers)
        except CodecError as exc:
            return routed, str(exc)
        if tail_at is not None:
            if len(self._jobs) >= self._max_jobs:
                self._jobs.clear()
            self._jobs[routed.value[tail_at:]] = self._job(run)
        return self._from_run(routed, run)

    def _job(self, run: RunEvent) -> _Job | str:
        target = run.target
        if not isinstance(target, KafkaTarget):
            return "the routing headers say kafka, the value does not"
        refusal = topic_refusal(target.topic, self._prefix)
        if refusal is not None:
            return refusal
        return _Job(
            target.topic,
            target.key.encode("utf-8") if target.key is not None else None,
            target.value.encode("utf-8"),
            run.target_service,
        )

    def _from_run(self, routed: Routed, run: RunEvent) -> tuple[Routed, str | None]:
        job = self._job(run)
        if isinstance(job, str):
            return routed, job
        run_text = str(run.run_id).encode("ascii")
        if (run_text, run.attempt) != (routed.ready_key, routed.attempt):
            return routed, "the routing headers and the value name different runs"
        scheduled = format_instant(run.scheduled_for).encode("ascii")
        return _with_emission(
            routed, job, run_text, run.attempt, run.job_id, run.tenant, run.scheduled_for, scheduled
        )

    def _instant(self, micros: int) -> tuple[datetime, bytes]:
        if len(self._instants) >= 4096:
            self._instants.clear()
        at = EPOCH + timedelta(microseconds=micros)
        made = self._instants[micros] = (at, format_instant(at).encode("ascii"))
        return made


def _with_emission(
    routed: Routed,
    job: _Job,
    run_text: bytes,
    attempt: int,
    job_id: str,
    tenant: str,
    scheduled_for: datetime,
    scheduled_text: bytes,
) -> tuple[Routed, None]:
    """``routed`` with the emission of its run of ``job`` set (in place, see ``plan``)."""
    routed.emission = Emission(
        job.topic,
        job.key,
        job.value,
        kafka_header_values(run_text, attempt, emitted_token(attempt), scheduled_text),
        run_text,
        attempt,
        job_id,
        tenant,
        job.target_service,
        scheduled_for,
    )
    return routed, None
