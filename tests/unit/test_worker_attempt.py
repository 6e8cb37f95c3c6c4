"""The attempt pipeline with in-memory ports: batched claims, renewals, self-fencing, completion.

Leases here are about a second long so that the lease logic runs for real (monotonic clock,
asyncio timers) while the tests stay fast; they wait on events, not on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from duetime.events import RunHeartbeat, RunResult
from duetime.model import HttpTarget, RunEvent
from duetime.store import Claim, ClaimDeferred
from duetime_workers.attempt import AttemptRunner
from duetime_workers.blocking import BlockingCalls
from duetime_workers.config import WorkerConfig
from duetime_workers.outcome import AttemptOutcome, OutcomeKind, final, retryable
from tests.fakes.run_store import FakeRun, FakeStore

SCHEDULED = datetime(2026, 1, 1, tzinfo=UTC)


def _run(
    attempt: int = 1, max_attempts: int = 3, lease_s: float = 1.0, hb_s: float = 0.2
) -> RunEvent:
    return RunEvent(
        run_id=uuid.uuid4(),
        job_id="job-1",
        tenant="acme",
        scheduled_for=SCHEDULED,
        due_at=SCHEDULED,
        attempt=attempt,
        max_attempts=max_attempts,
        target_service="svc",
        target=HttpTarget(url="https://example.com/hook"),
        lease=timedelta(seconds=lease_s),
        heartbeat_interval=timedelta(seconds=hb_s),
    )


@dataclass
class FakeEvents:
    heartbeats: list[RunHeartbeat] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)

    def heartbeat(self, heartbeat: RunHeartbeat) -> None:
        self.heartbeats.append(heartbeat)

    def result(self, result: RunResult) -> None:
        self.results.append(result)


class FakeTargets:
    """Returns ``outcome``; with ``hold`` it waits until released (or cancelled)."""

    def __init__(
        self, outcome: AttemptOutcome | Exception, hold: bool = False, took: float = 0.0
    ) -> None:
        self.outcome = outcome
        self.took = took  # seconds each execution takes
        self.took_each: list[float] = []  # or these, one per execution in call order
        self.completions_at_end: list[int] = []  # completions written when each one ended
        self.collector_on: list[bool] = []  # whether automatic collection was on at each start
        self.running = 0
        self.most_running = 0
        self.completions_seen: list[int] = []  # completions written when each execution began
        self.store: FakeStore | None = None
        self.calls: list[int] = []
        self.started_at: list[datetime] = []
        self.fencing_tokens: list[int] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False
        self._hold = hold

    async def prewarm(self, run: RunEvent, count: int) -> int:
        return 0

    async def execute(self, run: RunEvent, claim: Claim) -> AttemptOutcome:
        self.started_at.append(datetime.now(UTC))
        self.collector_on.append(gc.isenabled())
        if self.store is not None:
            self.completions_seen.append(len(self.store.completions))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        took = self.took_each.pop(0) if self.took_each else self.took
        try:
            if took:
                await asyncio.sleep(took)
        finally:
            self.running -= 1
            if self.store is not None:
                self.completions_at_end.append(len(self.store.completions))
        self.calls.append(claim.attempt)
        self.fencing_tokens.append(claim.fencing_token)
        self.started.set()
        try:
            if self._hold:
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


OK = AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=200)


@pytest.fixture
async def calls() -> AsyncIterator[BlockingCalls]:
    pool = BlockingCalls(max_workers=8, name="test-db")
    yield pool
    for runner in _STARTED:
        await runner.stop()
    _STARTED.clear()
    pool.shutdown()


_STARTED: list[AttemptRunner] = []


def _runner(
    store: FakeStore,
    events: FakeEvents,
    targets: FakeTargets,
    calls: BlockingCalls,
    *,
    stopping: asyncio.Event | None = None,
    backoff: Callable[[RunEvent, int], timedelta] = lambda run, n: timedelta(seconds=7),
    **config: Any,
) -> AttemptRunner:
    settings = replace(WorkerConfig(worker_id="w-test"), **config)
    runner = AttemptRunner(
        config=settings,
        store=store,
        events=events,
        targets=targets,
        calls=calls,
        stopping=stopping or asyncio.Event(),
        backoff=backoff,
    )
    runner.start()
    _STARTED.append(runner)  # stopped by the ``calls`` fixture
    return runner


async def test_success(calls: BlockingCalls) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    report = await _runner(store, events, targets, calls).run(_run())
    assert (report.status, report.commit) == ("succeeded", True)
    assert targets.calls == [1]
    assert targets.fencing_tokens == [2]  # the claim's token reaches the target
    (done,) = store.completions
    assert (done.state, done.outcome, done.status_code, done.attempt) == (
        "succeeded",
        "succeeded",
        200,
        1,
    )
    (result,) = events.results
    assert (result.outcome, result.state, result.attempt, result.tenant) == (
        "succeeded",
        "succeeded",
        1,
        "acme",
    )


async def test_duplicate_message_claims_nothing(calls: BlockingCalls) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    run = _run()
    store.runs[run.run_id] = FakeRun(state="succeeded", attempt=1)
    report = await _runner(store, events, targets, calls).run(run)
    assert (report.status, report.commit) == ("claim_skipped", True)
    assert targets.calls == [] and events.results == []


async def test_retryable_failure_schedules_a_retry_after_backoff(calls: BlockingCalls) -> None:
    store, events = FakeStore(), FakeEvents()
    report = await _runner(store, events, FakeTargets(retryable("HTTP 500", 500)), calls).run(
        _run()
    )
    assert report.status == "retry_scheduled"
    (done,) = store.completions
    assert (done.state, done.outcome, done.retry_delay) == (
        "scheduled",
        "failed",
        timedelta(seconds=7),
    )
    assert events.results[0].state == "scheduled"


async def test_retry_after_longer_than_backoff_wins(calls: BlockingCalls) -> None:
    store = FakeStore()
    slow_down = AttemptOutcome(OutcomeKind.RETRYABLE, "HTTP 429", 429, timedelta(minutes=5))
    await _runner(store, FakeEvents(), FakeTargets(slow_down), calls).run(_run())
    assert store.completions[0].retry_delay == timedelta(minutes=5)


async def test_last_attempt_failure_is_dead(calls: BlockingCalls) -> None:
    store, run = FakeStore(), _run(attempt=3, max_attempts=3)
    store.runs[run.run_id] = FakeRun(attempt=2)
    report = await _runner(store, FakeEvents(), FakeTargets(retryable("boom")), calls).run(run)
    assert report.status == "dead"
    assert store.completions[0].state == "dead"


async def test_final_failure_is_dead(calls: BlockingCalls) -> None:
    store = FakeStore()
    report = await _runner(store, FakeEvents(), FakeTargets(final("HTTP 400", 400)), calls).run(
        _run()
    )
    assert report.status == "dead"
    assert (store.completions[0].error, store.completions[0].status_code) == ("HTTP 400", 400)


async def test_executor_bug_fails_the_attempt_instead_of_leaking_the_lease(
    calls: BlockingCalls,
) -> None:
    store = FakeStore()
    report = await _runner(store, FakeEvents(), FakeTargets(RuntimeError("bug")), calls).run(_run())
    assert report.status == "retry_scheduled"
    assert store.completions[0].error == "internal worker error: RuntimeError"


async def test_heartbeats_renew_and_are_announced(calls: BlockingCalls) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    task = asyncio.create_task(_runner(store, events, targets, calls).run(_run(hb_s=0.05)))
    await _until(lambda: len(events.heartbeats) >= 3)
    targets.release.set()
    assert (await task).status == "succeeded"
    beat = events.heartbeats[0]
    assert (beat.attempt, beat.worker) == (1, "w-test")
    assert beat.lease_expires_at > datetime.now(UTC)


async def test_an_attempt_still_running_after_a_second_is_announced_before_any_renewal(
    calls: BlockingCalls,
) -> None:
    # The reaper learns of attempts from runs.heartbeats: one whose worker dies before its first
    # renewal (20 s by default) must still have been announced, with the claim's lease.
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    run = _run(lease_s=30, hb_s=10)
    task = asyncio.create_task(_runner(store, events, targets, calls).run(run))
    await targets.started.wait()
    assert events.heartbeats == []
    await _until(lambda: len(events.heartbeats) == 1, within=3)
    assert store.renewals == 0
    (beat,) = events.heartbeats
    assert (beat.run_id, beat.attempt, beat.worker) == (run.run_id, 1, "w-test")
    assert datetime.now(UTC) + timedelta(seconds=25) < beat.lease_expires_at
    targets.release.set()
    assert (await task).status == "succeeded"
    assert len(events.heartbeats) == 1


async def test_a_short_attempt_is_not_announced(calls: BlockingCalls) -> None:
    # Most attempts of a spike end within a second: they cost the heartbeat topic nothing.
    store, events = FakeStore(), FakeEvents()
    runner = _runner(store, events, FakeTargets(OK), calls)
    assert (await runner.run(_run(lease_s=30, hb_s=10))).status == "succeeded"
    await asyncio.sleep(1.2)
    assert events.heartbeats == [] and len(events.results) == 1


async def test_lease_taken_away_cancels_the_execution_and_nothing_completes(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    run = _run(hb_s=0.05)
    task = asyncio.create_task(_runner(store, events, targets, calls).run(run))
    await targets.started.wait()
    store.steal(run.run_id)
    report = await asyncio.wait_for(task, timeout=5)
    assert (report.status, report.commit) == ("lease_lost", True)
    assert targets.cancelled
    assert store.completions == [] and store.fenced == []
    (result,) = events.results
    assert (result.outcome, result.state) == ("fenced", "unknown")


async def test_silent_database_partition_self_fences_before_the_lease_ends(
    calls: BlockingCalls,
) -> None:
    hang = threading.Event()
    store, targets = FakeStore(heartbeat_hang=hang), FakeTargets(OK, hold=True)
    started = time.monotonic()
    try:
        report = await asyncio.wait_for(
            _runner(store, FakeEvents(), targets, calls).run(_run(lease_s=1.0, hb_s=0.2)), 5
        )
        elapsed = time.monotonic() - started
    finally:
        hang.set()
    assert report.status == "lease_lost"
    assert targets.cancelled
    # The local deadline is lease - margin (1.0 - 0.5 s) after the claim was sent: the worker
    # stops before the database would let the reaper hand the run to someone else.
    assert 0.45 <= elapsed < 1.0
    assert store.completions == []


async def test_completion_with_a_stale_token_is_fenced(calls: BlockingCalls) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    # A long heartbeat interval: the theft is only discovered by the completion.
    run = _run(lease_s=30, hb_s=10)
    task = asyncio.create_task(_runner(store, events, targets, calls).run(run))
    await targets.started.wait()
    store.steal(run.run_id)
    targets.release.set()
    report = await task
    assert report.status == "completion_fenced"
    assert store.completions == [] and len(store.fenced) == 1
    assert events.results[0].outcome == "fenced"


async def test_completion_is_retried_through_database_errors(calls: BlockingCalls) -> None:
    store = FakeStore(complete_errors=2)
    report = await _runner(store, FakeEvents(), FakeTargets(OK), calls).run(_run(lease_s=5))
    assert report.status == "succeeded"
    assert len(store.completions) == 1


async def test_completion_that_never_lands_is_left_to_the_reaper(calls: BlockingCalls) -> None:
    store = FakeStore(complete_errors=1000)
    report = await asyncio.wait_for(
        _runner(store, FakeEvents(), FakeTargets(OK), calls).run(_run(lease_s=1.0)), 5
    )
    assert (report.status, report.commit) == ("completion_failed", True)


async def test_a_hanging_completion_gives_up_when_the_lease_runs_out(
    calls: BlockingCalls,
) -> None:
    # The statement neither fails nor returns (a silent partition). Its own deadline is 10 s,
    # but the attempt's lease ends long before: the reaper owns the run from then on.
    hang = threading.Event()
    store, events = FakeStore(complete_hang=hang), FakeEvents()
    runner = _runner(store, events, FakeTargets(OK), calls, db_call_timeout=timedelta(seconds=10))
    started = time.monotonic()
    try:
        report = await asyncio.wait_for(runner.run(_run(lease_s=1.0)), 5)
        elapsed = time.monotonic() - started
    finally:
        hang.set()
    assert (report.status, report.commit) == ("completion_failed", True)
    # The local deadline is lease - margin (1.0 - 0.5 s) after the claim was sent.
    assert 0.45 <= elapsed < 1.0
    assert events.results == []
    # The completion batcher serves the next attempt once the hang is over.
    store.complete_hang = None
    assert (await asyncio.wait_for(runner.run(_run(lease_s=5.0)), 5)).status == "succeeded"


class _StallingTargets(FakeTargets):
    """The process stops mid-call (SIGSTOP, a VM pause): nothing runs on the event loop, not
    even the lease renewer, and the target's answer is there when it goes on."""

    def __init__(self, stall_s: float) -> None:
        super().__init__(OK)
        self._stall_s = stall_s

    async def prewarm(self, run: RunEvent, count: int) -> int:
        return 0

    async def execute(self, run: RunEvent, claim: Claim) -> AttemptOutcome:
        time.sleep(self._stall_s)  # noqa: ASYNC251 - the point: the whole loop stalls
        return await super().execute(run, claim)


async def test_an_attempt_that_outlived_its_lease_fences_itself_and_sends_no_completion(
    calls: BlockingCalls,
) -> None:
    # Once the local lease deadline has passed the reaper may have given the run to another
    # worker: the zombie neither completes nor tries to, it reports the lease lost.
    store, events = FakeStore(), FakeEvents()
    report = await asyncio.wait_for(
        _runner(store, events, _StallingTargets(0.8), calls).run(_run(lease_s=1.0)), 5
    )
    assert report.status == "lease_lost"
    assert store.complete_calls == 0 and store.completions == []
    assert [result.outcome for result in events.results] == ["fenced"]


async def test_claim_is_retried_through_database_errors(calls: BlockingCalls) -> None:
    store, targets = FakeStore(claim_errors=2), FakeTargets(OK)
    report = await _runner(store, FakeEvents(), targets, calls).run(_run())
    assert report.status == "succeeded"
    assert targets.calls == [1]


async def test_claim_gives_up_and_commits_for_the_sweeper(calls: BlockingCalls) -> None:
    store = FakeStore(claim_errors=1000)
    runner = _runner(
        store, FakeEvents(), FakeTargets(OK), calls, claim_give_up=timedelta(milliseconds=300)
    )
    report = await asyncio.wait_for(runner.run(_run()), 5)
    assert (report.status, report.commit) == ("claim_failed", True)


async def test_shutdown_abandons_a_failing_claim_without_commit(calls: BlockingCalls) -> None:
    stopping = asyncio.Event()
    stopping.set()
    runner = _runner(
        FakeStore(claim_errors=1000), FakeEvents(), FakeTargets(OK), calls, stopping=stopping
    )
    report = await runner.run(_run())
    assert (report.status, report.commit) == ("abandoned", False)


async def test_claim_call_that_hangs_hits_its_deadline(calls: BlockingCalls) -> None:
    release = threading.Event()

    class HangingClaim(FakeStore):
        def runs_claim_batch(
            self, *args: Any, **kwargs: Any
        ) -> dict[uuid.UUID, Claim | ClaimDeferred]:
            release.wait()
            return {}

    runner = _runner(
        HangingClaim(),
        FakeEvents(),
        FakeTargets(OK),
        calls,
        db_call_timeout=timedelta(milliseconds=100),
        claim_give_up=timedelta(milliseconds=250),
    )
    try:
        report = await asyncio.wait_for(runner.run(_run()), 5)
    finally:
        release.set()
    assert report.status == "claim_failed"


async def test_a_claim_whose_reply_was_lost_is_recognised_and_the_run_executes(
    calls: BlockingCalls,
) -> None:
    # The claim committed but its reply never came: the retry, with the same token, must find
    # its own claim. Otherwise a run with max_attempts 1 would never execute.
    store, targets = FakeStore(claim_lost_replies=1), FakeTargets(OK)
    report = await _runner(store, FakeEvents(), targets, calls).run(_run(max_attempts=1))
    assert report.status == "succeeded"
    assert targets.calls == [1] and store.claim_calls == 2


async def test_a_completion_whose_reply_was_lost_is_recognised(calls: BlockingCalls) -> None:
    store, events = FakeStore(complete_lost_replies=1), FakeEvents()
    report = await _runner(store, events, FakeTargets(OK), calls).run(_run(lease_s=5))
    assert report.status == "succeeded"
    assert len(store.completions) == 1 and store.fenced == []
    assert [r.outcome for r in events.results] == ["succeeded"]


async def test_concurrent_attempts_share_claim_completion_and_renewal_statements(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    runner = _runner(store, events, targets, calls)
    tasks = [asyncio.create_task(runner.run(_run(lease_s=2.0, hb_s=0.1))) for _ in range(50)]
    await _until(lambda: len(targets.calls) == 50)
    await _until(lambda: len(events.heartbeats) >= 100)
    targets.release.set()
    reports = await asyncio.gather(*tasks)
    assert {r.status for r in reports} == {"succeeded"}
    assert len(store.completions) == 50
    # 50 attempts, a handful of statements: batching, not one transaction per run.
    assert store.claim_calls <= 3 and store.complete_calls <= 3
    assert store.renewals <= len(events.heartbeats) / 10


async def _until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# claims ahead (docs/claim-ahead.md) ----------------------------------------------------------


def _due_in(seconds: float, store: FakeStore, **kwargs: Any) -> RunEvent:
    """A run due ``seconds`` from now, as a dispatcher releases it ahead."""
    due = datetime.now(UTC) + timedelta(seconds=seconds)
    run = replace(_run(**kwargs), scheduled_for=due, due_at=due)
    store.runs[run.run_id] = FakeRun(due_at=due)
    return run


async def test_a_run_released_ahead_is_claimed_at_once_and_started_at_its_due_instant(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    run = _due_in(0.4, store)
    attempt = asyncio.create_task(_runner(store, events, targets, calls).run(run))
    await _until(lambda: store.runs[run.run_id].state == "running")
    assert datetime.now(UTC) < run.due_at and targets.calls == []  # claimed, waiting
    report = await attempt
    assert report.status == "succeeded"
    (started,) = targets.started_at
    assert started >= run.due_at
    assert store.claim_calls == 1 and len(store.completions) == 1
    # The completion says when the call started (the claim could only guess the due instant).
    recorded = store.completions[0].started_at
    assert recorded is not None and run.due_at <= recorded <= started


async def test_a_claim_ahead_is_not_fenced_before_its_lease_counts(
    calls: BlockingCalls,
) -> None:
    """Due in 1.5 s with a 1 s lease: the local lease counts from the due instant, so the wait
    neither self-fences the attempt nor loses its lease."""
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    run = _due_in(1.5, store, lease_s=1.0)
    report = await _runner(store, events, targets, calls).run(run)
    assert report.status == "succeeded" and targets.calls == [1]
    assert targets.started_at[0] >= run.due_at


async def test_a_worker_stopping_before_the_due_instant_gives_its_claims_ahead_back(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    run = _due_in(30, store)
    runner = _runner(store, events, targets, calls)
    attempt = asyncio.create_task(runner.run(run))
    await _until(lambda: store.runs[run.run_id].state == "running")
    runner.hand_back()
    report = await asyncio.wait_for(attempt, 5)
    assert (report.status, report.commit) == ("given_back", True)
    assert targets.calls == [] and events.results == [] and store.completions == []
    back = store.runs[run.run_id]
    assert (back.state, back.attempt, back.attempts, store.unclaimed) == ("scheduled", 0, {}, 1)


async def test_a_run_of_a_job_with_an_overlap_policy_is_claimed_at_its_due_instant(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(overlap_jobs={"job-1"}), FakeEvents(), FakeTargets(OK)
    run = _due_in(0.3, store)
    attempt = asyncio.create_task(_runner(store, events, targets, calls).run(run))
    await _until(lambda: store.claim_calls == 1)
    assert store.runs[run.run_id].state == "scheduled"  # deferred: nothing claimed yet
    report = await attempt
    assert report.status == "succeeded" and store.claim_calls == 2
    assert targets.started_at[0] >= run.due_at


def _due_together(store: FakeStore, count: int) -> tuple[datetime, list[RunEvent]]:
    """``count`` runs due together 0.3 s from now, released ahead, with 30 s leases."""
    due = datetime.now(UTC) + timedelta(seconds=0.3)
    runs = []
    for _ in range(count):
        run = replace(_run(lease_s=30, hb_s=10), scheduled_for=due, due_at=due)
        store.runs[run.run_id] = FakeRun(due_at=due)
        runs.append(run)
    return due, runs


async def test_runs_claimed_ahead_start_through_a_gate_of_concurrency_permits(
    calls: BlockingCalls,
) -> None:
    """Six runs due at the same instant, two permits: never more than two execute at once,
    every one starts at or after its due instant, and the last permit comes back."""
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, took=0.05)
    due, runs = _due_together(store, 6)
    runner = _runner(store, events, targets, calls, concurrency=2)
    reports = await asyncio.gather(*(runner.run(run) for run in runs))
    assert [r.status for r in reports] == ["succeeded"] * 6
    assert targets.most_running == 2
    assert min(targets.started_at) >= due
    assert runner._permits == 2 and not runner._due


async def test_completions_of_runs_claimed_ahead_wait_for_their_wave_to_go_out(
    calls: BlockingCalls,
) -> None:
    """One permit, three runs due together: the target calls go first, the completions after
    the last of them has started."""
    store, events = FakeStore(), FakeEvents()
    targets = FakeTargets(OK, took=0.1)
    targets.store = store
    _, runs = _due_together(store, 3)
    runner = _runner(store, events, targets, calls, concurrency=1)
    reports = await asyncio.gather(*(runner.run(run) for run in runs))
    assert [r.status for r in reports] == ["succeeded"] * 3
    assert targets.completions_seen == [0, 0, 0]
    assert len(store.completions) == 3


async def test_the_wave_ends_when_the_last_execution_it_let_through_ends(
    calls: BlockingCalls,
) -> None:
    """Two permits, four runs due together, the second call slow: the completions held for
    the wave are written once that call has ended, not as soon as the gate is empty (the
    completions waking all at once would delay a call just let through)."""
    store, events = FakeStore(), FakeEvents()
    targets = FakeTargets(OK)
    targets.store = store
    targets.took_each = [0.05, 0.4, 0.05, 0.05]
    _, runs = _due_together(store, 4)
    runner = _runner(store, events, targets, calls, concurrency=2)
    reports = await asyncio.gather(*(runner.run(run) for run in runs))
    assert [r.status for r in reports] == ["succeeded"] * 4
    # In call order of their ends: the first (a run still waited in the gate: held), the
    # third and the fourth (the gate empty: written at once), the slow second: the first's
    # completion is still held when it ends (an empty gate alone released it before).
    assert targets.completions_at_end == [0, 0, 1, 2]
    assert len(store.completions) == 4


async def test_the_collector_waits_while_a_wave_goes_out(calls: BlockingCalls) -> None:
    """More runs due together than permits: no automatic garbage collection from the due
    instant until the wave is over, and on again after it; a run alone does not pause it."""
    store, events = FakeStore(), FakeEvents()
    targets = FakeTargets(OK, took=0.02)
    _, runs = _due_together(store, 3)
    runner = _runner(store, events, targets, calls, concurrency=1)
    assert gc.isenabled()
    reports = await asyncio.gather(*(runner.run(run) for run in runs))
    assert [r.status for r in reports] == ["succeeded"] * 3
    assert targets.collector_on == [False, False, False]
    assert gc.isenabled()
    (alone,) = _due_together(store, 1)[1]
    assert (await runner.run(alone)).status == "succeeded"
    assert targets.collector_on[-1] is True


async def test_a_stopping_worker_hands_back_a_wave_at_once(calls: BlockingCalls) -> None:
    """The first of three runs due together executes, the others wait in the gate: at the
    hand-back the waiting ones are given back (unclaimed), the executing one is cancelled and
    handed back, and its completion is not held for a wave that will not go out."""
    store, events = FakeStore(), FakeEvents()
    targets = FakeTargets(OK, hold=True)
    _, runs = _due_together(store, 3)
    runner = _runner(store, events, targets, calls, concurrency=1)
    attempts = [asyncio.create_task(runner.run(run)) for run in runs]
    await asyncio.wait_for(targets.started.wait(), 5)
    runner.hand_back()
    done, _ = await asyncio.wait(attempts, timeout=1.0)  # the wave hold would be 2 s
    assert len(done) == 3
    assert sorted(t.result().status for t in done) == ["given_back", "given_back", "handed_back"]
