"""Catch-up after an outage: which occurrences to materialize now, as a pure function.

Occurrences between the job's stored ``next_run_at`` and ``now`` split in two:

* on time: ``scheduled_for >= now - grace``. Always materialized; being a little late is not an
  outage, and the planner calls with ``now = now + lookahead`` to create runs ahead of time.
* missed: older than that. The job's policy decides:

  - ``once`` (default): one run, for the **most recent** missed occurrence. Its scheduled_for is
    a real occurrence, so the run record stays unique per (job_id, scheduled_for) and a second
    planner computing the same plan inserts the same row.
  - ``all``: every missed occurrence, but at most ``max_catch_up``; when there are more, the
    **oldest are dropped** and the newest kept, because the recent ones are what a reader of
    the results expects to see and the cost of a long outage stays bounded.
  - ``skip``: none; the job resumes with its next on-time occurrence.

What a policy leaves out is reported as one range (``CatchUpPlan.skipped``): the occurrence
ledger records it, so "did my 02:00 job run, and if not, why?" has an answer, at the cost of one
row per outage rather than one per occurrence.

Only the newest missed occurrences are enumerated (probing backwards from the cut-off), so a
per-second schedule after a week-long outage costs ``max_catch_up`` steps, not 600,000.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import get_args

from duetime.errors import ScheduleError
from duetime.schedule._instants import require_aware
from duetime.schedule._types import CatchUp, Schedule

__all__ = ["CatchUpPlan", "plan_due"]

_ONE_MICROSECOND = timedelta(microseconds=1)
_ONE_SECOND = timedelta(seconds=1)
_POLICIES = frozenset(get_args(CatchUp))


@dataclass(frozen=True)
class CatchUpPlan:
    """What the planner should do for one job now.

    Attributes:
        occurrences: The scheduled_for of each run to create now, ascending (aware UTC).
        next_run_at: The job's next scheduled_for after them; None when it never fires again.
        skipped: The missed occurrences the policy leaves out, as ``(first, end)``: every
            occurrence from ``first`` (one itself) up to, not including, ``end``. None when
            nothing was left out.
    """

    occurrences: tuple[datetime, ...]
    next_run_at: datetime | None
    skipped: tuple[datetime, datetime] | None = None


def _newest_before(
    schedule: Schedule, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """Return the newest ``limit`` occurrences in [start, end); ``start`` is an occurrence."""
    if limit <= 0:
        return []
    following = schedule.next_after(start)
    if following is None or following >= end:
        return [start]
    span = max(following - start, _ONE_SECOND) * (limit + 1)
    while True:
        newest: deque[datetime] = deque(maxlen=limit)
        if span >= end - start:
            newest.append(start)
            cursor: datetime | None = following
        else:
            cursor = schedule.next_after(end - span)
        while cursor is not None and cursor < end:
            newest.append(cursor)
            cursor = schedule.next_after(cursor)
        if len(newest) >= limit or span >= end - start:
            return list(newest)
        span *= 4


def plan_due(
    schedule: Schedule,
    next_run_at: datetime,
    now: datetime,
    policy: CatchUp,
    max_catch_up: int,
    grace: timedelta = timedelta(seconds=60),
) -> CatchUpPlan:
    """Plan the runs of one job whose stored next occurrence is ``next_run_at``.

    Args:
        schedule: The job's compiled schedule.
        next_run_at: The job's stored next scheduled_for (an occurrence of ``schedule``).
        now: Materialize every occurrence up to and including this instant; the planner passes
            its clock plus its lookahead.
        policy: ``once``, ``all`` or ``skip`` for missed occurrences (see the module docs).
        max_catch_up: The most missed occurrences ``all`` creates (0 behaves like ``skip``).
        grace: How late an occurrence may be and still count as on time.

    Raises:
        ScheduleError: For an unknown policy, a negative ``max_catch_up`` or ``grace``.
    """
    require_aware(next_run_at, "next_run_at")
    require_aware(now, "now")
    if policy not in _POLICIES:
        raise ScheduleError("catch_up", f"{policy!r} is not one of once, all, skip")
    if max_catch_up < 0:
        raise ScheduleError("max_catch_up", f"must be 0 or more, got {max_catch_up}")
    if grace < timedelta(0):
        raise ScheduleError("grace", f"must not be negative, got {grace}")
    if next_run_at > now:
        return CatchUpPlan((), next_run_at)
    cutoff = now - grace
    missed: list[datetime] = []
    cursor: datetime | None = next_run_at
    if next_run_at < cutoff:
        if policy == "once":
            missed = _newest_before(schedule, next_run_at, cutoff, 1)
        elif policy == "all":
            missed = _newest_before(schedule, next_run_at, cutoff, max_catch_up)
        cursor = schedule.next_after(cutoff - _ONE_MICROSECOND)
    on_time: list[datetime] = []
    while cursor is not None and cursor <= now:
        on_time.append(cursor)
        cursor = schedule.next_after(cursor)
    skipped = None
    if next_run_at < cutoff:
        # Everything missed before the first one kept (or, with none kept, before the first
        # on-time occurrence; or, with none at all, the cut-off) was left out.
        kept = missed[0] if missed else (on_time[0] if on_time else cursor)
        end = cutoff if kept is None or kept > cutoff else kept
        if next_run_at < end:
            skipped = (next_run_at, end)
    return CatchUpPlan(tuple(missed + on_time), cursor, skipped)
