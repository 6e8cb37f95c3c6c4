"""The planner's decisions, as pure functions of the jobs, their schedules and now.

Given a job whose ``next_run_at`` has come within the lookahead, decide which runs to create (the
catch-up policy decides about occurrences missed during an outage), each run's ``due_at`` (window
jitter), and the job's new ``next_run_at``. ``plan_jobs`` does it for a whole batch, searching the
schedule once per (spec, next_run_at, catch-up) group: at midnight 100k jobs share a few specs
and one instant. ``lookahead_for`` decides how far ahead to plan when a spike is coming. No I/O:
the planner service wires this to PostgreSQL.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol, cast

from duetime.errors import InvalidInput
from duetime.model import run_id_for
from duetime.schedule import (
    CatchUp,
    CatchUpPlan,
    Schedule,
    ScheduleCache,
    ScheduleSpec,
    due_at,
    plan_due,
)
from duetime.schedule._windows import WINDOW_RESOLUTION

__all__ = [
    "DueJobLike",
    "JobPlan",
    "PlannedRun",
    "PlanningRate",
    "initial_next_run_at",
    "lookahead_for",
    "plan_job",
    "plan_jobs",
    "plan_jobs_capped",
]


@dataclass(slots=True)
class PlannedRun:
    """One occurrence a plan creates. Not frozen, for speed alone (the planner makes one per
    run; a frozen dataclass's ``__init__`` costs three times as much); nothing assigns to one
    once made (``dataclasses.replace`` makes a new one)."""

    run_id: uuid.UUID
    scheduled_for: datetime
    due_at: datetime


@dataclass(frozen=True)
class JobPlan:
    runs: tuple[PlannedRun, ...]
    next_run_at: datetime | None
    #: Missed occurrences the catch-up policy left out: [first, end) (CatchUpPlan.skipped).
    skipped: tuple[datetime, datetime] | None = None


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
    plan = plan_due(
        cache.get(spec),
        next_run_at,
        now + lookahead,
        cast(CatchUp, catch_up),
        max_catch_up,
        grace=grace + lookahead,
    )
    return _job_plan(job_id, window, plan)


def _job_plan(job_id: str, window: timedelta, plan: CatchUpPlan) -> JobPlan:
    """The runs of one job from its occurrences: run ids and window jitter are per job."""
    occurrences = plan.occurrences
    if window < WINDOW_RESOLUTION:  # no offset: due_at would give each occurrence itself
        runs = [PlannedRun(run_id_for(job_id, at), at, at) for at in occurrences]
    else:
        runs = []
        for index, scheduled_for in enumerate(occurrences):
            following = occurrences[index + 1] if index + 1 < len(occurrences) else plan.next_run_at
            runs.append(
                PlannedRun(
                    run_id=run_id_for(job_id, scheduled_for),
                    scheduled_for=scheduled_for,
                    due_at=due_at(job_id, scheduled_for, window, following),
                )
            )
    return JobPlan(runs=tuple(runs), next_run_at=plan.next_run_at, skipped=plan.skipped)


class DueJobLike(Protocol):
    """What ``plan_jobs`` reads of a due job (the store's ``DueJob`` has these fields)."""

    @property
    def job_id(self) -> str: ...
    @property
    def schedule(self) -> ScheduleSpec: ...
    @property
    def window(self) -> timedelta: ...
    @property
    def catch_up(self) -> str: ...
    @property
    def max_catch_up(self) -> int: ...
    @property
    def next_run_at(self) -> datetime: ...


def plan_jobs(
    jobs: Sequence[DueJobLike],
    *,
    now: datetime,
    lookahead: timedelta,
    cache: ScheduleCache,
    grace: timedelta = timedelta(seconds=60),
) -> list[JobPlan | InvalidInput]:
    """``plan_job`` for a batch, in input order; an unschedulable job gets its error instead.

    The schedule search (``plan_due``) depends only on (spec, next_run_at, catch-up policy,
    bound), so it runs once per such group; what differs per job (run id, window jitter) is
    cheap. A spec that no longer compiles (a zone removed from tzdata) fails its jobs only.
    """
    plans = plan_jobs_capped(jobs, now=now, lookahead=lookahead, cache=cache, grace=grace)[0]
    return cast(list[JobPlan | InvalidInput], plans)  # uncapped: no plan is left out (None)


def plan_jobs_capped(
    jobs: Sequence[DueJobLike],
    *,
    now: datetime,
    lookahead: timedelta,
    cache: ScheduleCache,
    grace: timedelta = timedelta(seconds=60),
    max_runs: int | None = None,
    whole_jobs_from: datetime | None = None,
) -> tuple[list[JobPlan | InvalidInput | None], bool]:
    """``plan_jobs`` holding about ``max_runs`` runs, earliest first; and whether it was cut.

    Two ways to cut, in this order:

    * **Whole jobs** (when ``whole_jobs_from`` is given): the batch keeps its first jobs (the due
      scan's order: oldest ``next_run_at`` first) with every run of theirs, as many as fit in
      ``max_runs`` (one at least), and leaves the others out entirely: their plan is ``None``,
      they are not advanced and the next batch finds them still due. Chosen only when every job
      left out has its first run at ``whole_jobs_from`` or later (the caller's "not urgent":
      the lookahead's far half), so nothing close to its due time waits for the next batch.
      This is what keeps synchronised frequent jobs cheap: 5,000 every-second jobs due together
      at the lookahead's edge are planned 15 runs a visit in slices of whole jobs, instead of
      every job 2 runs at a time, each visit a row read, locked and advanced.

    A batch of frequent jobs is large: 5,000 every-second jobs with a 30 s lookahead are 155,000
    runs, one transaction of tens of seconds before the first of them is published. Cut, the batch
    keeps every job's runs scheduled before one instant (the cutoff, chosen so that at most
    ``max_runs`` runs are kept) and each cut job's ``next_run_at`` becomes its first run left out,
    so the next batch goes on from there: the whole lookahead is still planned, in slices, in time
    order. The cut is made on the occurrences, before run ids and window jitter are computed for
    them (those are most of a batch's CPU).

    * **In time** otherwise (a job's first runs are close, as when frequent jobs start or a
      planner fell behind): see above.

    Never cut: a job's first run (so every batch makes progress) and its missed runs (older than
    ``now - grace``): those its catch-up policy chose, bounded by ``max_catch_up``, and cutting
    them would put them through the policy a second time. Runs late but within the grace are cut
    like future ones: a planner that falls behind keeps its batches small, and an occurrence it
    could not plan within the grace meets the job's catch-up policy, as after any outage.
    """
    if max_runs is not None and max_runs < 1:
        raise ValueError(f"max_runs must be at least 1, not {max_runs}")
    horizon = now + lookahead
    searched: dict[tuple[ScheduleSpec, datetime, str, int], CatchUpPlan | InvalidInput] = {}
    found: list[CatchUpPlan | InvalidInput] = []
    for job in jobs:
        key = (job.schedule, job.next_run_at, job.catch_up, job.max_catch_up)
        plan = searched.get(key)
        if plan is None:
            try:
                plan = plan_due(
                    cache.get(job.schedule),
                    job.next_run_at,
                    horizon,
                    cast(CatchUp, job.catch_up),
                    job.max_catch_up,
                    grace=grace + lookahead,
                )
            except InvalidInput as exc:
                plan = exc
            searched[key] = plan
        found.append(plan)
    cut = False
    kept: Sequence[CatchUpPlan | InvalidInput | None] = found
    if max_runs is not None:
        whole = None if whole_jobs_from is None else _whole_jobs(found, max_runs, whole_jobs_from)
        if whole is not None:
            kept, cut = whole, True
        else:
            kept, cut = _cap(found, max_runs, now - grace)
    plans: list[JobPlan | InvalidInput | None] = [
        plan
        if plan is None or isinstance(plan, InvalidInput)
        else _job_plan(job.job_id, job.window, plan)
        for job, plan in zip(jobs, kept, strict=True)
    ]
    return plans, cut


def _whole_jobs(
    plans: list[CatchUpPlan | InvalidInput], max_runs: int, not_before: datetime
) -> list[CatchUpPlan | InvalidInput | None] | None:
    """The first plans that fit in ``max_runs`` runs (one at least), the rest ``None``; or
    ``None`` when all fit, or when a plan left out has a run before ``not_before``."""
    total = 0
    for index, plan in enumerate(plans):
        runs = len(plan.occurrences) if isinstance(plan, CatchUpPlan) else 0
        if index > 0 and total + runs > max_runs:
            break
        total += runs
    else:
        return None
    rest = plans[index:]
    if any(
        isinstance(p, CatchUpPlan) and p.occurrences and p.occurrences[0] < not_before for p in rest
    ):
        return None
    return [*plans[:index], *([None] * len(rest))]


def _cap(
    plans: list[CatchUpPlan | InvalidInput], max_runs: int, missed_before: datetime
) -> tuple[list[CatchUpPlan | InvalidInput], bool]:
    """``plans`` cut to about ``max_runs`` occurrences (``plan_jobs_capped``).

    Jobs that share a schedule and a next run share one plan object (``plan_jobs_capped``
    searches once per group), so the occurrences are counted per distinct plan and per instant:
    a steady batch of 5000 jobs due every second, planned 10 s ahead, is a handful of plans and
    instants, not 50,000 occurrences to sort."""
    total = 0
    shared: dict[int, tuple[CatchUpPlan, int]] = {}
    for p in plans:
        if isinstance(p, CatchUpPlan):
            total += len(p.occurrences)
            known = shared.get(id(p))
            shared[id(p)] = (p, 1 if known is None else known[1] + 1)
    if total <= max_runs:
        return plans, False
    per_instant: dict[datetime, int] = {}
    for p, jobs in shared.values():
        for o in p.occurrences[1:]:
            if o >= missed_before:
                per_instant[o] = per_instant.get(o, 0) + jobs
    cuttable = sum(per_instant.values())
    room = max(max_runs - (total - cuttable), 0)
    if room >= cuttable:
        return plans, False
    # The earliest instant left out: the one the (room + 1)-th cuttable occurrence falls on.
    counted = 0
    for cutoff in sorted(per_instant):
        counted += per_instant[cutoff]
        if counted > room:
            break
    cut_plans: dict[int, CatchUpPlan] = {}
    out: list[CatchUpPlan | InvalidInput] = []
    cut = False
    for plan in plans:
        if isinstance(plan, CatchUpPlan):
            kept = cut_plans.get(id(plan))
            if kept is None:
                occurrences = plan.occurrences
                keep = bisect_left(occurrences, cutoff, lo=1)
                kept = plan
                if keep < len(occurrences):
                    kept = replace(
                        plan, occurrences=occurrences[:keep], next_run_at=occurrences[keep]
                    )
                cut_plans[id(plan)] = kept
            cut = cut or kept is not plan
            plan = kept
        out.append(plan)
    return out, cut


def lookahead_for(
    *,
    now: datetime,
    base: timedelta,
    maximum: timedelta,
    jobs_per_second: float,
    due_counts: Sequence[tuple[datetime, int]],
) -> timedelta:
    """How far ahead to plan so that a spike is published ``base`` before it is due.

    ``due_counts`` is a histogram of the jobs due ahead: (bucket end, jobs due in the bucket),
    in time order. Planning everything due up to a bucket's end takes (jobs due up to it) /
    ``jobs_per_second``; to be done ``base`` before that end, it must start that much earlier.
    The lookahead reaches the furthest bucket whose start time has come, so a quiet night plans
    ``base`` ahead, and 100k runs at midnight are planned early enough to be out ``base`` before
    T. Never more than ``maximum`` (the dispatcher holds runs for a bounded time).
    """
    lookahead = base
    cumulative = 0
    for bucket_end, count in due_counts:
        cumulative += count
        ahead = bucket_end - now
        if ahead > maximum:
            break
        work = timedelta(seconds=cumulative / jobs_per_second)
        if ahead - base - work <= timedelta(0):
            lookahead = max(lookahead, ahead)
    return min(lookahead, maximum)


@dataclass
class PlanningRate:
    """How many jobs per second the planner plans and publishes, for ``lookahead_for``.

    Starts from ``assumed`` (a conservative default) and learns from busy rounds (at least
    ``min_jobs`` jobs): an exponentially weighted mean of jobs / busy second. The rate used is the
    lower of the two, so a loaded or slow machine plans its spikes earlier, and a fast one never
    later than the configuration says.
    """

    assumed: float
    min_jobs: int = 1000
    smoothing: float = 0.3
    measured: float | None = field(default=None)

    def observe(self, jobs: int, busy_seconds: float) -> None:
        if jobs < self.min_jobs or busy_seconds <= 0:
            return
        sample = jobs / busy_seconds
        if self.measured is None:
            self.measured = sample
        else:
            self.measured += self.smoothing * (sample - self.measured)

    @property
    def jobs_per_second(self) -> float:
        return self.assumed if self.measured is None else min(self.assumed, self.measured)
