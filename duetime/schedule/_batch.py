"""Next occurrences for many jobs at once: the planner's hot path at midnight.

At 00:00 a hundred thousand jobs fall due over a few dozen distinct expressions. Compiling per job
or searching per job would repeat the same work; here each distinct spec is compiled once (in
``ScheduleCache``, which lives as long as the caller wants) and each distinct (spec, after) pair
is searched once per batch, since jobs that share a spec and fell due together share ``after``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

from duetime.schedule._compile import compile_schedule
from duetime.schedule._types import Schedule, ScheduleSpec

__all__ = ["ScheduleCache", "next_fires"]

_UNKNOWN = object()


class ScheduleCache:
    """Compiled schedules by spec, so each distinct spec is validated and compiled once.

    Bounded: past ``max_size`` distinct specs the oldest entry is evicted. Safe to share between
    threads under CPython (dict operations are atomic; a race at worst compiles twice).
    """

    def __init__(self, max_size: int = 100_000) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self._max_size = max_size
        self._compiled: dict[ScheduleSpec, Schedule] = {}

    def __len__(self) -> int:
        return len(self._compiled)

    def get(self, spec: ScheduleSpec) -> Schedule:
        """Return the compiled schedule for ``spec``, compiling it on first use.

        Raises:
            ScheduleError: When the spec does not compile (nothing is cached then).
        """
        schedule = self._compiled.get(spec)
        if schedule is None:
            schedule = compile_schedule(spec)
            if len(self._compiled) >= self._max_size:
                self._compiled.pop(next(iter(self._compiled)), None)
            self._compiled[spec] = schedule
        return schedule


def next_fires(
    specs_and_afters: Sequence[tuple[ScheduleSpec, datetime]],
    cache: ScheduleCache | None = None,
) -> list[datetime | None]:
    """Return, for each (spec, after), the first occurrence strictly after ``after``.

    Args:
        specs_and_afters: One pair per job; ``after`` is aware (usually the job's last
            scheduled_for).
        cache: Compiled schedules to reuse across batches; a fresh one when None.

    Returns:
        Aware UTC instants in input order; None where the schedule never fires again.

    Raises:
        ScheduleError: When a spec does not compile. Specs are validated at ingest, so one
            failing here is a bug worth stopping the batch for.
    """
    compiled = ScheduleCache() if cache is None else cache
    # Per spec: its schedule and the answers already found in this batch, keyed by ``after``.
    per_spec: dict[ScheduleSpec, tuple[Schedule, dict[datetime, datetime | None]]] = {}
    results: list[datetime | None] = []
    append = results.append
    for spec, after in specs_and_afters:
        entry = per_spec.get(spec)
        if entry is None:
            entry = per_spec[spec] = (compiled.get(spec), {})
        schedule, answers = entry
        answer = answers.get(after, _UNKNOWN)
        if answer is _UNKNOWN:
            answer = answers[after] = schedule.next_after(after)
        append(cast("datetime | None", answer))
    return results
