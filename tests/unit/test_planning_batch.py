"""The planner's batch decisions: grouped schedule search, and a lookahead that grows for spikes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from duetime.errors import InvalidInput
from duetime.planning import (
    JobPlan,
    PlanningRate,
    lookahead_for,
    plan_job,
    plan_jobs,
    plan_jobs_capped,
)
from duetime.schedule import ScheduleCache, ScheduleSpec

NOW = datetime(2026, 12, 31, 23, 59, 40, tzinfo=UTC)
MIDNIGHT = ScheduleSpec(kind="cron", expression="0 0 * * *", time_zone="UTC")
BASE = timedelta(seconds=30)


@dataclass(frozen=True)
class _Due:
    job_id: str
    schedule: ScheduleSpec
    next_run_at: datetime
    window: timedelta = timedelta(0)
    catch_up: str = "once"
    max_catch_up: int = 100


def test_plan_jobs_matches_plan_job_for_every_job() -> None:
    midnight = datetime(2027, 1, 1, tzinfo=UTC)
    jobs = [_Due(f"j{i}", MIDNIGHT, midnight, window=timedelta(seconds=i % 3)) for i in range(50)]
    jobs.append(
        _Due(
            "bad",
            ScheduleSpec(kind="cron", expression="0 0 * * *", time_zone="Mars/Base"),
            midnight,
        )
    )
    cache = ScheduleCache()
    plans = plan_jobs(jobs, now=NOW, lookahead=BASE, cache=cache)
    assert isinstance(plans[-1], InvalidInput)
    for job, plan in zip(jobs[:-1], plans[:-1], strict=True):
        assert plan == plan_job(
            job_id=job.job_id,
            spec=job.schedule,
            window=job.window,
            catch_up=job.catch_up,
            max_catch_up=job.max_catch_up,
            next_run_at=job.next_run_at,
            now=NOW,
            lookahead=BASE,
            cache=cache,
        )
        assert isinstance(plan, JobPlan) and [r.scheduled_for for r in plan.runs] == [midnight]
    # Run ids differ per job although the schedule was searched once for all of them.
    assert len({p.runs[0].run_id for p in plans[:-1] if isinstance(p, JobPlan)}) == 50


def test_a_quiet_horizon_keeps_the_base_lookahead() -> None:
    counts = [(NOW + timedelta(seconds=s), 10) for s in range(5, 600, 5)]
    assert (
        lookahead_for(
            now=NOW,
            base=BASE,
            maximum=timedelta(minutes=10),
            jobs_per_second=4000,
            due_counts=counts,
        )
        == BASE
    )


def test_a_spike_is_planned_early_enough_to_be_out_the_base_before_it() -> None:
    spike_at = NOW + timedelta(seconds=100)
    counts = [(spike_at, 100_000)]
    rate = 4000.0  # 100k jobs take 25 s: planning must start 55 s before the spike
    far = lookahead_for(
        now=NOW, base=BASE, maximum=timedelta(minutes=10), jobs_per_second=rate, due_counts=counts
    )
    assert far == BASE  # 100 s ahead: not yet
    later = NOW + timedelta(seconds=45)
    near = lookahead_for(
        now=later, base=BASE, maximum=timedelta(minutes=10), jobs_per_second=rate, due_counts=counts
    )
    assert near == spike_at - later  # 55 s ahead: the spike is in the window now


def test_the_lookahead_never_exceeds_the_maximum() -> None:
    counts = [(NOW + timedelta(minutes=30), 10_000_000)]
    assert (
        lookahead_for(
            now=NOW,
            base=BASE,
            maximum=timedelta(minutes=10),
            jobs_per_second=100,
            due_counts=counts,
        )
        == BASE
    )
    counts = [(NOW + timedelta(minutes=5), 10_000_000)]
    assert lookahead_for(
        now=NOW, base=BASE, maximum=timedelta(minutes=10), jobs_per_second=100, due_counts=counts
    ) == timedelta(minutes=5)


def test_the_planning_rate_learns_from_busy_rounds_and_stays_conservative() -> None:
    rate = PlanningRate(assumed=1000.0, min_jobs=100)
    assert rate.jobs_per_second == 1000.0
    rate.observe(50, 1.0)  # too small a round to say anything
    assert rate.measured is None
    rate.observe(5000, 10.0)  # a loaded machine: 500/s
    assert rate.jobs_per_second == 500.0
    for _ in range(20):
        rate.observe(5000, 1.0)  # a fast machine: never faster than assumed
    assert rate.jobs_per_second == 1000.0


EVERY_SECOND = ScheduleSpec(kind="interval", expression="PT1S", time_zone="UTC")


def _runs(plans: Sequence[JobPlan | InvalidInput | None]) -> list[datetime]:
    return sorted(r.scheduled_for for p in plans if isinstance(p, JobPlan) for r in p.runs)


def test_a_capped_batch_keeps_the_earliest_runs_and_moves_each_cut_job_on() -> None:
    jobs = [_Due(f"j{i}", EVERY_SECOND, NOW + timedelta(seconds=i % 2)) for i in range(10)]
    whole = plan_jobs(jobs, now=NOW, lookahead=BASE, cache=ScheduleCache())
    assert len(_runs(whole)) > 250  # 31 or 30 a job
    capped, cut = plan_jobs_capped(
        jobs, now=NOW, lookahead=BASE, cache=ScheduleCache(), max_runs=50
    )
    assert cut
    kept = _runs(capped)
    assert len(kept) <= 50
    # Earliest first: nothing left out is earlier than anything kept.
    left_out = sorted(set(_runs(whole)) - set(kept))
    assert max(kept) < min(left_out)
    for job, full, part in zip(jobs, whole, capped, strict=True):
        assert isinstance(full, JobPlan) and isinstance(part, JobPlan)
        # The same runs (ids, window placement) as the whole plan's, cut short.
        assert part.runs == full.runs[: len(part.runs)]
        # The job goes on from its first run left out; planning from there gives the rest.
        assert part.next_run_at == full.runs[len(part.runs)].scheduled_for
        [rest] = plan_jobs(
            [replace(job, next_run_at=part.next_run_at)],
            now=NOW,
            lookahead=BASE,
            cache=ScheduleCache(),
        )
        assert isinstance(rest, JobPlan)
        assert part.runs + rest.runs == full.runs
        assert rest.next_run_at == full.next_run_at


def test_a_capped_batch_never_cuts_a_first_run_or_a_missed_run() -> None:
    # Ten jobs 100 s behind with catch_up all: 40 missed runs each (older than the 60 s grace),
    # then 61 late-but-on-time and 30 ahead.
    behind = [
        _Due(f"late{i}", EVERY_SECOND, NOW - timedelta(seconds=100), catch_up="all")
        for i in range(10)
    ]
    grace = timedelta(seconds=60)
    capped, cut = plan_jobs_capped(
        behind, now=NOW, lookahead=BASE, cache=ScheduleCache(), grace=grace, max_runs=5
    )
    assert cut
    for part in capped:
        assert isinstance(part, JobPlan)
        assert [r.scheduled_for for r in part.runs] == [
            NOW - timedelta(seconds=100 - s) for s in range(40)
        ]
        # The late runs within the grace are cut like future ones: the job goes on from there.
        assert part.next_run_at == NOW - grace
    # A job's first run is kept whatever the cap.
    ahead = [_Due(f"a{i}", EVERY_SECOND, NOW + timedelta(seconds=1)) for i in range(10)]
    firsts, cut = plan_jobs_capped(
        ahead, now=NOW, lookahead=BASE, cache=ScheduleCache(), max_runs=1
    )
    assert cut and _runs(firsts) == [NOW + timedelta(seconds=1)] * 10
    # Under the cap, or an unschedulable job in the batch: the plans are plan_jobs's.
    bad = _Due("bad", ScheduleSpec(kind="cron", expression="0 0 * * *", time_zone="Mars/Base"), NOW)
    batch = [*behind, bad]
    plain = plan_jobs(batch, now=NOW, lookahead=BASE, cache=ScheduleCache())
    big, cut = plan_jobs_capped(
        batch, now=NOW, lookahead=BASE, cache=ScheduleCache(), max_runs=10_000
    )
    assert not cut and [str(p) if isinstance(p, InvalidInput) else p for p in big] == [
        str(p) if isinstance(p, InvalidInput) else p for p in plain
    ]


def test_a_capped_batch_of_missed_runs_only_keeps_them_all() -> None:
    # Ten hourly jobs three hours behind with catch_up all: three missed runs each, and their
    # next run beyond the lookahead. Nothing may be cut, however small the cap (this raised
    # IndexError, and the planner's round failed on such a batch every time).
    hourly = ScheduleSpec(kind="cron", expression="30 * * * *", time_zone="UTC")
    behind = [
        _Due(f"h{i}", hourly, datetime(2026, 12, 31, 21, 30, tzinfo=UTC), catch_up="all")
        for i in range(10)
    ]
    capped, cut = plan_jobs_capped(
        behind, now=NOW, lookahead=BASE, cache=ScheduleCache(), max_runs=5
    )
    assert not cut
    assert capped == plan_jobs(behind, now=NOW, lookahead=BASE, cache=ScheduleCache())
    assert len(_runs(capped)) == 30


def test_a_capped_batch_counts_shared_plans_once_per_job() -> None:
    # 1000 jobs share one schedule and next run (one plan object): the cap counts each job's
    # runs, and cuts every one of them at the same instant.
    jobs = [_Due(f"j{i}", EVERY_SECOND, NOW + timedelta(seconds=1)) for i in range(1000)]
    capped, cut = plan_jobs_capped(
        jobs, now=NOW, lookahead=BASE, cache=ScheduleCache(), max_runs=3500
    )
    assert cut
    # 3 runs a job (3000) fit, a 4th each (4000) would not.
    assert all(isinstance(p, JobPlan) and len(p.runs) == 3 for p in capped)
    assert {p.next_run_at for p in capped if isinstance(p, JobPlan)} == {NOW + timedelta(seconds=4)}


def test_a_batch_of_jobs_due_at_the_lookaheads_far_half_keeps_whole_jobs() -> None:
    # Ten every-second jobs whose next run is 20 s ahead: 16 runs each up to +35 s.
    jobs = [_Due(f"j{i}", EVERY_SECOND, NOW + timedelta(seconds=20)) for i in range(10)]
    whole = plan_jobs(jobs, now=NOW, lookahead=timedelta(seconds=35), cache=ScheduleCache())
    capped, cut = plan_jobs_capped(
        jobs,
        now=NOW,
        lookahead=timedelta(seconds=35),
        cache=ScheduleCache(),
        max_runs=50,
        whole_jobs_from=NOW + timedelta(seconds=15),
    )
    # The first three jobs fit in 50 runs and keep every run; the others are left out whole.
    assert cut
    assert capped[:3] == whole[:3] and capped[3:] == [None] * 7
    # A job left out with a run before whole_jobs_from: cut in time instead, nothing left out.
    early = [*jobs[:9], _Due("soon", EVERY_SECOND, NOW + timedelta(seconds=5))]
    sliced, cut = plan_jobs_capped(
        early,
        now=NOW,
        lookahead=timedelta(seconds=35),
        cache=ScheduleCache(),
        max_runs=50,
        whole_jobs_from=NOW + timedelta(seconds=15),
    )
    assert cut and all(isinstance(p, JobPlan) and p.runs for p in sliced)
    # The first job is kept whole even when it alone holds more than max_runs.
    [first, *rest], cut = plan_jobs_capped(
        jobs,
        now=NOW,
        lookahead=timedelta(seconds=35),
        cache=ScheduleCache(),
        max_runs=5,
        whole_jobs_from=NOW + timedelta(seconds=15),
    )
    assert cut and first == whole[0] and rest == [None] * 9
    # Under the cap: plan_jobs's plans.
    assert plan_jobs_capped(
        jobs,
        now=NOW,
        lookahead=timedelta(seconds=35),
        cache=ScheduleCache(),
        max_runs=1000,
        whole_jobs_from=NOW,
    ) == (whole, False)
