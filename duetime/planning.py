"""The planner's decisions for one due job, as a pure function of the job, the schedule and now.

Given a job whose ``next_run_at`` has come within the lookahead, decide which runs to create (the
catch-up policy decides about occurrences missed during an outage), each run's ``due_at`` (window
jitter), and the job's new ``next_run_at``. No I/O: the planner service wires this to PostgreSQL.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from duetime.model import run_id_for
from duetime.schedule import CatchUp, Schedule, ScheduleCache, ScheduleSpec, due_at, plan_due

__all__ = ["JobPlan", "PlannedRun", "initial_next_run_at", "plan_job"]


@dataclass(frozen=True)
class PlannedRun:
    run_id: uuid.UUID
    scheduled_for: datetime
    due_at: datetime


@dataclass(frozen=True)
class JobPlan:
    runs: tuple[PlannedRun, ...]
    next_run_at: datetime | None


def initial_next_run_at(schedule: Schedule, now: datetime) -> datetime | None:
    """The first scheduled_for of a new (or re-scheduled) job.

    Cron and interval schedules start strictly after ``now``. A one-off ``at`` instant that is
    already past still runs once, right away: the user asked for it, and dropping it silently
    would be worse than running it late.
    """
    if schedule.spec.kind == "at":
        return schedule.next_after(datetime.min.replace(tzinfo=now.tzinfo))
    return schedule.next_after(now)


def plan_job(
    *,
    job_id: str,
    spec: ScheduleSpec,
    window: timedelta,
    catch_up: str,
    max_catch_up: int,
    next_run_at: datetime,
    now: datetime,
    lookahead: timedelta,
    cache: ScheduleCache,
    grace: timedelta = timedelta(seconds=60),
) -> JobPlan:
    """Runs to create for every occurrence up to ``now + lookahead`` (per the catch-up policy)."""
    schedule = cache.get(spec)
    plan = plan_due(
        schedule,
        next_run_at,
        now + lookahead,
        cast(CatchUp, catch_up),
        max_catch_up,
        grace=grace + lookahead,
    )
    runs: list[PlannedRun] = []
    occurrences = plan.occurrences
    for index, scheduled_for in enumerate(occurrences):
        following = occurrences[index + 1] if index + 1 < len(occurrences) else plan.next_run_at
        runs.append(
            PlannedRun(
                run_id=run_id_for(job_id, scheduled_for),
                scheduled_for=scheduled_for,
                due_at=due_at(job_id, scheduled_for, window, following),
            )
        )
    return JobPlan(runs=tuple(runs), next_run_at=plan.next_run_at)
