"""``runs.ready`` records decoded per job, not per run: the worker's intake hot path.

A RunEvent record is a per-run head (run id, job id, tenant, the two instants, the attempt)
followed by the job's tail, the same bytes for every run of one job version
(:mod:`duetime.bus.run_template`). The whole-record decode (``decode_run``: the Avro codec, then
the model's objects) cost ~19.5 µs a record; ``RunDecoder`` reads the head by hand and takes the
tail's fields from the first record of the job that the codec decoded whole, ~6 µs a record.

It accepts and refuses exactly what ``decode_run`` does: a record it cannot read on the short
path (a head that does not parse, a tail it has not seen, an attempt the tail does not allow,
an instant beyond the codec's range, a run id that is not a UUID) goes through ``decode_run``,
whose ``CodecError`` says what is wrong. The unit tests compare both over random records.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import EPOCH, FIRST_US, LAST_US, read_head
from duetime.errors import CodecError
from duetime.model import RunEvent, Target
from duetime.schedule import RetryPolicy

__all__ = ["RunDecoder", "decode_run", "run_problem"]

# What a job's tail decodes to: the RunEvent's fields after the attempt, in order.
_Job = tuple[int, str, Target, timedelta, timedelta, RetryPolicy]


def run_problem(run: RunEvent) -> str | None:
    """Why a decoded RunEvent cannot be executed, or None. Avro checks types, not meaning."""
    if run.attempt < 1:
        return f"attempt must be at least 1, not {run.attempt}"
    if run.max_attempts < run.attempt:
        return f"attempt {run.attempt} exceeds max_attempts {run.max_attempts}"
    if run.lease <= timedelta(0):
        return "lease must be positive"
    if run.scheduled_for.tzinfo is None:
        return "scheduled_for has no time zone"
    return None


def decode_run(value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None) -> RunEvent:
    """Decode and sanity-check one runs.ready record; every failure is a ``CodecError``."""
    try:
        run = RUN_EVENTS.decode(value, headers)
    except CodecError:
        raise
    except Exception as exc:  # e.g. OverflowError from an absurd lease_ms: still poison
        raise CodecError(f"RunEvent: {type(exc).__name__}: {exc}") from exc
    problem = run_problem(run)
    if problem is not None:
        raise CodecError(f"RunEvent: {problem}")
    return run


class RunDecoder:
    """``decode_run`` with each job's tail decoded once (one per consumer thread).

    Args:
        max_jobs: job tails remembered; beyond it the memory starts afresh (job versions come
            and go).
    """

    __slots__ = ("_instants", "_jobs", "_max_jobs")

    def __init__(self, max_jobs: int = 20_000) -> None:
        self._max_jobs = max_jobs
        self._jobs: dict[bytes, _Job] = {}
        # Instants in epoch µs -> the datetime: a second of runs shares one or a few.
        self._instants: dict[int, datetime] = {}

    def decode(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None
    ) -> RunEvent:
        """The record's RunEvent; ``CodecError`` when it is not a valid one."""
        if value is None:
            return decode_run(value, headers)
        RUN_EVENTS.check_headers(headers)
        try:
            run_text, job_id, tenant, scheduled_us, due_us, attempt, tail_at = read_head(value)
        except (IndexError, ValueError):
            return decode_run(value, headers)  # the codec says what is wrong
        tail = value[tail_at:]
        job = self._jobs.get(tail)
        if job is None:
            return self._learn(value, headers, tail)
        if not 1 <= attempt <= job[0]:
            return decode_run(value, headers)
        try:
            run_id = uuid.UUID(run_text.decode("ascii"))
            scheduled_for = self._instant(scheduled_us)
            due_at = self._instant(due_us)
        except (ValueError, OverflowError):
            return decode_run(value, headers)
        # Positionally, in the model's field order (the unit tests compare with the codec's).
        return RunEvent(run_id, job_id, tenant, scheduled_for, due_at, attempt, *job)

    def _learn(
        self, value: bytes, headers: Sequence[tuple[str, bytes | None]] | None, tail: bytes
    ) -> RunEvent:
        run = decode_run(value, headers)
        if len(self._jobs) >= self._max_jobs:
            self._jobs.clear()
        self._jobs[tail] = (
            run.max_attempts,
            run.target_service,
            run.target,
            run.lease,
            run.heartbeat_interval,
            run.retry,
        )
        return run

    def _instant(self, micros: int) -> datetime:
        known = self._instants.get(micros)
        if known is not None:
            return known
        if not FIRST_US <= micros <= LAST_US:
            raise OverflowError("instant beyond datetime's range")
        if len(self._instants) >= 4096:
            self._instants.clear()
        at = self._instants[micros] = EPOCH + timedelta(microseconds=micros)
        return at
