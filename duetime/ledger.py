"""The occurrence ledger: "did my 02:00 job run, and if not, why?", as a pure function.

Every occurrence of a job's schedule in a time range gets one line:

- it has a run record: the run's state (``succeeded``, ``dead``, ``running``, ``scheduled``, or
  ``skipped`` by the overlap policy, with the reason the run records);
- it falls into a recorded gap (``occurrence_gaps``): ``skipped`` because the catch-up policy
  left it out after an outage (``catch_up``, or ``max_catch_up`` for ``all``), or because the job
  was paused (``paused``);
- the job is paused now and the occurrence came after the pause began: ``skipped``, ``paused``;
- it is not planned yet (at or after the job's ``next_run_at``): ``upcoming`` while it lies in
  the future, ``unplanned`` once its time has passed (the planner is behind, or stopped);
- otherwise ``missed``: no run and no recorded reason. It should not happen; the line says so.

Two more kinds of line: a wall time the schedule names but that does not exist in the job's zone
(a DST gap under ``dst_gap: skip``), ``skipped`` with reason ``dst_gap``; and a run whose time is
not an occurrence of the current schedule (the job's schedule was changed since), listed with its
state and reason ``earlier definition``.

No clock and no I/O: ``duetime runs list --all-occurrences`` reads the job, its runs and its gaps
in the range, and passes them with the database's ``now``.

Runs do not stay in the database: ``duetime archive`` moves the partitions of old days to object
storage (docs/runs.md, "Retention and archive"). Read from the database alone, every occurrence of
an archived day would be ``missed``, a wrong answer. So when the range reaches days that can have
been archived (``archivable_days``), the caller reads the job's archived runs of those days too and
passes them through ``with_archived_runs`` before asking for the ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from duetime.schedule import Schedule

__all__ = [
    "GapLike",
    "LedgerLine",
    "RunLike",
    "archivable_days",
    "occurrence_ledger",
    "with_archived_runs",
]

_TINY = timedelta(microseconds=1)
_REASONS = {
    "catch_up": "the catch-up policy ({policy}) left it out after an outage",
    "max_catch_up": "catch-up all keeps the newest max_catch_up missed occurrences only",
    "paused": "the job was paused",
}


class RunLike(Protocol):
    @property
    def run_id(self) -> uuid.UUID: ...
    @property
    def scheduled_for(self) -> datetime: ...
    @property
    def state(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...


class GapLike(Protocol):
    @property
    def first_at(self) -> datetime: ...
    @property
    def end_at(self) -> datetime: ...
    @property
    def reason(self) -> str: ...
    @property
    def policy(self) -> str | None: ...


@dataclass(frozen=True)
class LedgerLine:
    """One occurrence (or one nonexistent wall time) and what became of it."""

    scheduled_for: datetime
    status: str
    reason: str = ""
    run_id: uuid.UUID | None = None
    attempt: int | None = None


def occurrence_ledger(
    schedule: Schedule,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    created_at: datetime,
    next_run_at: datetime | None,
    paused: bool,
    runs: Sequence[RunLike],
    gaps: Sequence[GapLike],
    limit: int,
) -> list[LedgerLine]:
    """Every occurrence in [since, until) from the job's creation on, newest first, at most
    ``limit`` lines (the newest ones)."""
    start = max(since, created_at)
    by_time = {run.scheduled_for: run for run in runs}
    lines: list[LedgerLine] = []
    occurrences = _occurrences(schedule, start, until, limit)
    for instant in occurrences:
        run = by_time.pop(instant, None)
        if run is not None:
            lines.append(_run_line(run, ""))
        else:
            lines.append(_unrun(instant, now, next_run_at, paused, gaps))
    # Runs of an earlier definition of the job: their times are not occurrences any more.
    for run in by_time.values():
        if run.scheduled_for >= start:
            lines.append(_run_line(run, "earlier definition"))
    for effect in schedule.dst_effects(start, until):
        if effect.kind == "skipped":
            zone = ZoneInfo(schedule.spec.time_zone)
            for wall in effect.walls:
                # Shown where the clocks land: the wall time read with the offset before the jump.
                instant = wall.replace(tzinfo=zone).astimezone(UTC)
                lines.append(LedgerLine(instant, "skipped", f"dst_gap: {effect.note}"))
    lines.sort(key=lambda line: line.scheduled_for, reverse=True)
    return lines[:limit]


def _occurrences(
    schedule: Schedule, start: datetime, until: datetime, limit: int
) -> list[datetime]:
    """The newest ``limit`` occurrences in [start, until), oldest first."""
    found: list[datetime] = []
    cursor = schedule.next_after(start - _TINY)  # an occurrence exactly at ``start`` counts
    while cursor is not None and cursor < until:
        found.append(cursor)
        if len(found) > 4 * limit:
            del found[: len(found) - limit]  # a long range of a fast schedule: keep the newest
        cursor = schedule.next_after(cursor)
    return found[-limit:] if limit > 0 else []


def _run_line(run: RunLike, reason: str) -> LedgerLine:
    why = reason or (run.last_error or "" if run.state in ("skipped", "cancelled", "dead") else "")
    return LedgerLine(run.scheduled_for, run.state, why, run.run_id, run.attempt)


def _unrun(
    instant: datetime,
    now: datetime,
    next_run_at: datetime | None,
    paused: bool,
    gaps: Sequence[GapLike],
) -> LedgerLine:
    for gap in gaps:
        if gap.first_at <= instant < gap.end_at:
            text = _REASONS.get(gap.reason, gap.reason).format(policy=gap.policy or "")
            return LedgerLine(instant, "skipped", f"{gap.reason}: {text}")
    if next_run_at is not None and instant >= next_run_at:
        if paused:
            return LedgerLine(instant, "skipped", "paused: the job is paused")
        if instant > now:
            return LedgerLine(instant, "upcoming")
        return LedgerLine(instant, "unplanned", "not planned yet: the planner is behind")
    return LedgerLine(instant, "missed", "no run and no recorded reason")


def archivable_days(since: datetime, until: datetime, now: datetime) -> tuple[date, date] | None:
    """The UTC days of [since, until) whose runs partition may have been archived, as a
    half-open range of days, or None when the range reaches none.

    The archiver never touches today's or yesterday's partition (the planner writes there), so
    only days before yesterday can be archived; a range that stays within the last day or two,
    the ledger's default, costs no object storage read.
    """
    first = since.astimezone(UTC).date()
    end = min(
        (until - _TINY).astimezone(UTC).date() + timedelta(days=1),
        now.astimezone(UTC).date() - timedelta(days=1),
    )
    return (first, end) if first < end else None


def with_archived_runs(
    runs: Sequence[RunLike], archived: Sequence[RunLike], *, since: datetime, until: datetime
) -> list[RunLike]:
    """The database's ``runs`` and the ``archived`` ones in [since, until), as one list.

    The database's copy of a run wins: a run id, or an occurrence, present in both is taken from
    the database (a day archived and then planned into again holds new runs beside the archive's).
    """
    seen_ids = {run.run_id for run in runs}
    seen_times = {run.scheduled_for for run in runs}
    merged = list(runs)
    for run in archived:
        if run.run_id in seen_ids or run.scheduled_for in seen_times:
            continue
        if since <= run.scheduled_for < until:
            merged.append(run)
            seen_times.add(run.scheduled_for)
    merged.sort(key=lambda run: run.scheduled_for)
    return merged
