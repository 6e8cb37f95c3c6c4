"""One run through a worker: claim, execute under a renewed lease, complete (fenced), announce.

::

    RunEvent ──claim CAS──► none ─────────────────────────────► skipped (duplicate / handled)
                 │
                 └► Claim(attempt, lease_token) ─► execute target ─┬► outcome ─► decide ─► complete
                        │                                          │              (fenced CAS)
                        └── LeaseRenewer renews every interval ────┘
                              lost ─► cancel the execution, do not complete (self-fencing)
                              hand_back() ─► cancel the execution, complete as handed back

Claims and completions go through ``StatementBatcher``s, so every attempt in flight in this
process shares one statement per batch with the others; leases are renewed for all attempts at
once by the ``LeaseRenewer``. With several PostgreSQL clusters each cluster has its own batchers
and renewer (a ``StoreLane``), and an attempt uses the lane of its job's cluster. The lease token
is generated here, once per attempt: a claim or a completion retried after a lost reply carries
the same token, and the database recognises its own earlier effect instead of burning the
attempt.

Every database call has a client-side deadline (``BlockingCalls``). The claim is retried through
database errors for ``claim_give_up``; after that the record is committed past anyway, because
the planner's sweeper re-publishes runs that stay unclaimed (the database, not Kafka, is what
guarantees a run is not lost). The completion is retried until the local lease deadline, and
no try waits beyond it (each statement's deadline is ``db_call_timeout`` or the time left on the
lease, whichever is shorter); if it never lands, the lease expires and the reaper schedules the
next attempt.

A target that answers 202 takes the attempt over (an async target, ``duetime.async_targets``):
the same fenced completion statement keeps the run ``running`` under the attempt's token with a
fresh lease of the job's length, renewals stop, a heartbeat tells the reaper to watch that
lease, and no result is announced; the target completes the attempt through the API, or the
reaper expires it.

A stopping worker calls ``hand_back()`` for the attempts still running when its grace ends: each
cancels its execution and ends its attempt through the same fenced completion, as ``scheduled``
with no delay (or ``dead`` on the last attempt), so the run is retried at once instead of after
its lease has lapsed.

A run released ahead of its due instant (docs/claim-ahead.md) is claimed at once, with a lease
that counts from the due instant, and waits in memory until then (``DueClock``: this host's
clock corrected towards the database's); at the due instant only the target call is left. A
run of a job with an overlap policy is claimed at the due instant instead (the claim is
``DEFERRED``). A claim ahead whose worker stops before the due instant is given back
(``unclaim``): the run is scheduled again as if never claimed, no attempt burnt.

The ``AttemptReport`` says what happened and whether the Kafka offset may be committed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from duetime.aio import wait_event
from duetime.collector import pause_collector
from duetime.errors import StoreError
from duetime.events import RunHeartbeat, RunResult
from duetime.model import RunEvent
from duetime.schedule import retry_delay
from duetime.store import AttemptEnd, Claim, ClaimDeferred, ClaimRequest, Unclaim

from .blocking import BlockingCalls
from .config import WorkerConfig
from .decision import Completion, decide, hand_back
from .due_clock import DueClock
from .lanes import ClusterRunStores, StoreLane, build_lanes
from .logs import event, logger
from .metrics import WorkerMetrics
from .outcome import AttemptOutcome, OutcomeKind, retryable
from .ports import RunEvents, RunStore, TargetExecutor
from .renewer import HeldLease

__all__ = ["AttemptReport", "AttemptRunner", "AttemptStatus", "default_backoff"]

AttemptStatus = Literal[
    "claim_skipped",  # nothing to claim: a duplicate message, or already handled
    "claim_failed",  # the database kept failing; the sweeper will re-publish the run
    "abandoned",  # shutdown interrupted the claim; the record will be re-delivered
    "succeeded",
    "retry_scheduled",
    "dead",
    "lease_lost",  # self-fenced: execution cancelled, nothing completed
    "completion_fenced",  # the database rejected the completion (stale lease token)
    "completion_failed",  # the completion never reached the database; the reaper takes over
    "handed_back",  # the worker stopped: execution cancelled, the run is due again at once
    "handed_to_target",  # 202: the async target holds the lease and reports through the API
    "given_back",  # claimed ahead, the worker stopped before the due instant: unclaimed
    "give_back_failed",  # ... and the unclaim did not land: the lease lapses, the reaper retries
]

# The state recorded on a RunResult when this worker does not know it: it lost the lease, so
# whoever holds the run now (the reaper, another worker) decides what the run becomes.
UNKNOWN_STATE = "unknown"
_CLAIM_RETRY_FIRST = 0.2
_CLAIM_RETRY_MAX = 5.0
_COMPLETE_RETRY_FIRST = 0.1
_COMPLETE_RETRY_MAX = 1.0
_CLOCK_PROBE_INTERVAL = 10.0
# The longest the completion of a run claimed ahead waits for its wave (``_after_wave``).
_WAVE_HOLD = 2.0
# The longest the cyclic garbage collector stays paused for a wave (``_pause_collector``).
_COLLECTOR_PAUSE = 2.0
# How long before a wave of runs claimed ahead is due its connections are opened (``_expect``):
# close enough that servers with short keep-alive timeouts (5 s is common) keep them open.
_WARM_AHEAD = 1.0


@dataclass(frozen=True)
class AttemptReport:
    status: AttemptStatus
    commit: bool = True


def default_backoff(run: RunEvent, attempt: int) -> timedelta:
    """The retry delay after ``attempt`` failed.

    The RunEvent does not carry the job's retry policy, so the policy's defaults are used with
    the run's ``max_attempts`` (deterministic per run_id and attempt, like the reaper's).
    """
    return retry_delay(run.retry, str(run.run_id), attempt)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _context(run: RunEvent, attempt: int | None = None) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "attempt": attempt if attempt is not None else run.attempt,
        "tenant": run.tenant,
        "job_id": run.job_id,
    }


class AttemptRunner:
    """Runs attempts for one worker process; one ``run()`` call per RunEvent.

    ``start()`` (on the event loop) before the first run, ``stop()`` after the last.
    """

    def __init__(
        self,
        *,
        config: WorkerConfig,
        store: RunStore | ClusterRunStores,
        events: RunEvents,
        targets: TargetExecutor,
        calls: BlockingCalls,
        stopping: asyncio.Event,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utc_now,
        backoff: Callable[[RunEvent, int], timedelta] = default_backoff,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._config = config
        self._events = events
        self._targets = targets
        self._calls = calls
        self._stopping = stopping
        self._monotonic = monotonic
        self._now = now
        self._backoff = backoff
        # What a hand-back interrupts: runs claimed ahead waiting for their due instant, and
        # executions. Sets, not callbacks on one shared future: a spike holds tens of thousands
        # at once, and removing a future's callback scans all of its callbacks.
        self._handing_back = False
        self._waiting: set[asyncio.Future[bool]] = set()
        self._executing: set[Callable[[], None]] = set()  # each interrupts one call
        # The due gate (``_wait_until_due``): free permits, and the due runs waiting for one.
        self._permits = config.concurrency
        self._due: collections.deque[asyncio.Future[bool]] = collections.deque()
        # Runs claimed ahead by due instant, one timer for each instant (``_wait_until_due``).
        self._at: dict[datetime, list[asyncio.Future[bool]]] = {}
        # Resolved when the gate empties and every permit is back: the completions of runs
        # claimed ahead wait for it.
        self._wave: asyncio.Future[None] | None = None
        # While a wave goes out, the collector waits (``_pause_collector``): when to resume.
        self._collector_resume: asyncio.TimerHandle | None = None
        # Warm-ups to come (``_expect``): (target URL, due second) -> [a run, runs expected].
        self._expected: dict[tuple[str, int], list[Any]] = {}
        self._warming: set[asyncio.Task[int]] = set()
        timeout = config.db_call_timeout.total_seconds()
        self.due_clock = DueClock(now)
        self._clock_probe: asyncio.Task[None] | None = None

        def lane(cluster_store: RunStore) -> StoreLane:
            return StoreLane(
                cluster_store,
                worker=config.worker_id,
                events=events,
                calls=calls,
                timeout=timeout,
                monotonic=monotonic,
                now=now,
                due_clock=self.due_clock,
                metrics=metrics,
            )

        # lanes[i] serves cluster i; _cluster_of is None with one cluster (nothing to route).
        self.lanes, self._cluster_of = build_lanes(store, lane)

    def _lane(self, run: RunEvent) -> StoreLane:
        if self._cluster_of is None:
            return self.lanes[0]
        return self.lanes[self._cluster_of(run.job_id)]

    @property
    def leases_held(self) -> int:
        return sum(lane.leases.held for lane in self.lanes)

    def statements(self) -> dict[str, int]:
        """Statements sent so far, by kind (the ``worker.stats`` line)."""
        return {
            "claim_statements": sum(lane.claims.statements for lane in self.lanes),
            "completion_statements": sum(lane.completions.statements for lane in self.lanes),
            "renewal_statements": sum(lane.leases.rounds for lane in self.lanes),
        }

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()
        self._clock_probe = asyncio.create_task(self._probe_clock())

    async def _probe_clock(self) -> None:
        """Sample the database clock now and every ``_CLOCK_PROBE_INTERVAL``: claims ahead
        start by it (the home cluster's clock, where the planner computes due instants)."""
        while True:
            try:
                await self.lanes[0].probe_clock()
            except (StoreError, TimeoutError) as exc:
                event("clock.probe_failed", logging.WARNING, error=_describe(exc))
            await asyncio.sleep(_CLOCK_PROBE_INTERVAL)

    def hand_back(self) -> None:
        """Stop every attempt that is executing and hand its run back (retried at once); give
        back the runs claimed ahead that are not due yet."""
        self._handing_back = True
        self._wave_over()
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(False)
        for interrupt in list(self._executing):
            interrupt()

    async def stop(self) -> None:
        self._resume_collector()
        for task in list(self._warming):
            task.cancel()
        if self._clock_probe is not None:
            self._clock_probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._clock_probe
        for lane in self.lanes:
            await lane.stop()

    async def run(
        self, run: RunEvent, released_at: datetime | None = None, throttled_ms: int | None = None
    ) -> AttemptReport:
        """One attempt of ``run``: claim, execute under the lease, complete. ``released_at`` and
        ``throttled_ms`` are the dispatcher's stamps on the record, recorded by the claim."""
        lane = self._lane(run)
        ahead = self.until_due(run) > 0
        claimed = await self._claim(lane, run, released_at, throttled_ms, ahead=ahead)
        if isinstance(claimed, AttemptReport):
            return claimed
        claim, sent_at = claimed
        if not ahead:
            assert isinstance(claim, Claim)  # a claim that is not ahead is never deferred
            return await self._attempt(lane, run, claim, sent_at, gated=False)
        if isinstance(claim, ClaimDeferred):
            # Its job has an overlap policy: whether the job is busy is decided at the due
            # instant, so the claim is made then.
            if not await self._wait_until_due(run):
                return AttemptReport("abandoned", commit=False)
            try:
                claimed = await self._claim(lane, run, released_at, throttled_ms, ahead=False)
            except BaseException:
                self._pass_permit()
                raise
            if isinstance(claimed, AttemptReport):
                self._pass_permit()
                return claimed
            claim, sent_at = claimed
            assert isinstance(claim, Claim)  # a claim that is not ahead is never deferred
            return await self._attempt(lane, run, claim, sent_at, gated=True)
        # The lease counts from the due instant: the claim's database time plus what was left
        # until due (the statement's lease minus the lease), so the local one too.
        sent_at += max(0.0, (claim.lease_expires_at - claim.claimed_at - run.lease).total_seconds())
        self._expect(run)
        if not await self._wait_until_due(run):
            return await self._give_back(lane, run, claim)
        return await self._attempt(lane, run, claim, sent_at, gated=True)

    async def _attempt(
        self, lane: StoreLane, run: RunEvent, claim: Claim, sent_at: float, *, gated: bool
    ) -> AttemptReport:
        """Execute a claimed attempt under its lease and complete it. ``gated``: a run claimed
        ahead, holding one of the due gate's permits until its execution ends."""
        if logger.isEnabledFor(logging.DEBUG):
            ctx = _context(run, claim.attempt)
            event("run.claimed", logging.DEBUG, **ctx, target_service=run.target_service)
        claimed_ahead = gated
        try:
            lease = lane.leases.hold(run, claim, sent_at)
            if claimed_ahead:
                # Its claim put its start at the due instant; the gate may have kept it later.
                lease.started_at = self.due_clock.db_now()
            try:
                outcome = await self._execute_leased(run, claim, lease)
            finally:
                # Renewals stop with the execution: a completion that cannot reach the
                # database is retried only until the lease runs out, then the reaper takes
                # over. The next run claimed ahead that is due may start.
                lane.leases.release(lease)
                if gated:
                    gated = False
                    self._pass_permit()
        finally:
            if gated:
                self._pass_permit()
        if (
            claimed_ahead
            and self._due
            and lease.clock.remaining(self._monotonic()) > _WAVE_HOLD * 4
        ):
            await self._after_wave()
        if outcome == "lost":
            self._announce(run, claim, "fenced", UNKNOWN_STATE, "lease lost")
            return AttemptReport("lease_lost")
        if outcome == "handed_back":
            return await self._finish(
                lane, run, claim, lease, hand_back(claim.attempt, run.max_attempts)
            )
        # The retry policy's delay only matters to a retryable failure.
        backoff = (
            self._backoff(run, claim.attempt)
            if outcome.kind is OutcomeKind.RETRYABLE
            else timedelta(0)
        )
        completion = decide(outcome, claim.attempt, run.max_attempts, backoff)
        return await self._finish(lane, run, claim, lease, completion)

    def until_due(self, run: RunEvent) -> float:
        """Seconds until ``run`` is due on the database clock (as this host can tell); above
        zero, the run was released ahead and is claimed ahead."""
        return self.due_clock.until(run.due_at)

    # claim --------------------------------------------------------------------------------
    async def _claim(
        self,
        lane: StoreLane,
        run: RunEvent,
        released_at: datetime | None,
        throttled_ms: int | None,
        *,
        ahead: bool,
    ) -> tuple[Claim | ClaimDeferred, float] | AttemptReport:
        """The claim and the monotonic time its statement was sent, or why there is none."""
        ctx = _context(run)
        # One token for every try: a retry after a lost reply must recognise its own claim.
        request = ClaimRequest(
            run.run_id,
            run.scheduled_for,
            run.attempt,
            uuid.uuid4(),
            run.lease,
            released_at=released_at,
            throttled_ms=throttled_ms,
            job_id=run.job_id,
            ahead=ahead,
        )
        give_up_at = self._monotonic() + self._config.claim_give_up.total_seconds()
        pause = _CLAIM_RETRY_FIRST
        while True:
            sent_at = self._monotonic()
            try:
                claim = await lane.claims.submit(request)
            except (StoreError, TimeoutError) as exc:
                event("run.claim_error", logging.WARNING, **ctx, error=_describe(exc))
            else:
                if claim is None:
                    event("run.claim_skipped", logging.DEBUG, **ctx)
                    return AttemptReport("claim_skipped")
                return claim, sent_at
            if self._stopping.is_set():
                return AttemptReport("abandoned", commit=False)
            if self._monotonic() + pause > give_up_at:
                event("run.claim_failed", logging.ERROR, **ctx)
                return AttemptReport("claim_failed")
            await wait_event(self._stopping, pause)
            pause = min(pause * 2, _CLAIM_RETRY_MAX)

    # ahead --------------------------------------------------------------------------------
    async def _wait_until_due(self, run: RunEvent) -> bool:
        """Wait until ``run`` is due and one of the due gate's permits is free, and take it;
        False if the worker hands its runs back first (no permit taken).

        The gate lets ``concurrency`` runs claimed ahead execute at once, in due order. Without
        it, the tens of thousands of a spike would all wake at the due instant, and the event
        loop would step every one of them (to wait for a connection) before it sent the first
        request: measured, the first request left 0.45 s after the due instant."""
        if self._handing_back:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        delay = self.until_due(run)
        if delay > 0:
            # One timer per due instant, not per run: a spike holds tens of thousands of runs
            # due in the same second, and as many timers made every timer of the event loop
            # (each call's timeout) dearer, then took ~40 ms to fire at the due instant.
            waiters = self._at.get(run.due_at)
            if waiters is None:
                waiters = self._at[run.due_at] = []
                loop.call_later(delay, self._on_due_at, run.due_at)
            waiters.append(waiter)
        else:
            self._on_due(waiter)
        self._waiting.add(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self._pass_permit()  # granted, then cancelled before it could run
            raise
        finally:
            self._waiting.discard(waiter)

    def _on_due_at(self, due_at: datetime) -> None:
        """The timer of the runs due at ``due_at``: into the gate, in the order claimed; if
        the clock's estimate moved since the timer was set, it waits on for the rest."""
        delay = self.due_clock.until(due_at)
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._on_due_at, due_at)
            return
        for waiter in self._at.pop(due_at, ()):
            self._on_due(waiter)
        if self._due:
            self._pause_collector()  # a wave: more due runs than permits

    def _pause_collector(self) -> None:
        """No automatic garbage collection until the wave is over (``_COLLECTOR_PAUSE`` at
        most). A process holding a spike's runs claimed ahead has hundreds of thousands of
        objects alive, and a young collection then took 20-75 ms: one in the middle of a
        wave stopped every call of the process for that long (measured in a 20k HTTP
        spike). What the wave makes, the collections after it find."""
        if self._collector_resume is not None or not pause_collector():
            return  # paused already, or the process runs without it on purpose
        loop = asyncio.get_running_loop()
        self._collector_resume = loop.call_later(_COLLECTOR_PAUSE, self._resume_collector)

    def _resume_collector(self) -> None:
        if self._collector_resume is not None:
            self._collector_resume.cancel()
            self._collector_resume = None
            gc.enable()

    def _on_due(self, waiter: asyncio.Future[bool]) -> None:
        if waiter.done():
            return  # handed back, or its task was cancelled
        if self._permits > 0:
            self._permits -= 1
            waiter.set_result(True)
        else:
            self._due.append(waiter)

    def _pass_permit(self) -> None:
        """An execution that held a permit ended: the next due run in line takes it over."""
        due = self._due
        while due:
            waiter = due.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self._permits += 1
        if self._permits >= self._config.concurrency:
            # Nothing waits in the gate and nothing it let through still executes: the wave
            # is over. Not sooner: the completions held for it wake all at once, and a run
            # just let through would start its call behind thousands of them (measured: the
            # last 30 calls of a 20k spike left 0.3 s late).
            self._wave_over()

    def _wave_over(self) -> None:
        """The held completions go, and the collector is on again."""
        _settle(self._wave)
        self._resume_collector()

    async def _after_wave(self) -> None:
        """Wait until no due run waits in the gate and none it let through executes, for
        ``_WAVE_HOLD`` at most.

        A run claimed ahead writes its completion (and announces its result) after the wave of
        runs due with it has gone out: at the due instant of a spike the target calls come
        first, and the database and the bus get the completions right after. Under a long
        overload they go out every ``_WAVE_HOLD``, in bursts; the hold is skipped for a lease
        too short to wait that long."""
        wave = self._wave
        if wave is None or wave.done():
            loop = asyncio.get_running_loop()
            wave = self._wave = loop.create_future()
            loop.call_later(_WAVE_HOLD, _settle, wave)
        await wave

    def _expect(self, run: RunEvent) -> None:
        """A run claimed ahead: the connections its wave needs are opened ``_WARM_AHEAD``
        before it is due (one warm-up per target URL and due second, for as many runs as
        were claimed for it by then, at most ``concurrency``), so that the first calls at the
        due instant do not each wait for a handshake (measured: the first requests of a 20k
        spike reached the target 0.1 s after the due instant, as 512 connections opened)."""
        url = getattr(run.target, "url", None)
        if url is None:
            return  # not an HTTP target: nothing to open
        key = (url, int(run.due_at.timestamp()))
        expected = self._expected.get(key)
        if expected is not None:
            expected[1] += 1
            return
        self._expected[key] = [run, 1]
        delay = max(0.0, self.until_due(run) - _WARM_AHEAD)
        asyncio.get_running_loop().call_later(delay, self._warm, key)

    def _warm(self, key: tuple[str, int]) -> None:
        run, count = self._expected.pop(key)
        task = asyncio.create_task(self._targets.prewarm(run, min(count, self._config.concurrency)))
        self._warming.add(task)
        task.add_done_callback(self._warmed)

    def _warmed(self, task: asyncio.Task[int]) -> None:
        self._warming.discard(task)
        if not task.cancelled() and task.exception() is not None:
            event("http.prewarm_failed", logging.WARNING, error=repr(task.exception()))

    async def _give_back(self, lane: StoreLane, run: RunEvent, claim: Claim) -> AttemptReport:
        """The worker stops before the due instant of a run it claimed ahead: unclaim it."""
        ctx = _context(run, claim.attempt)
        unclaim = Unclaim(run.run_id, run.scheduled_for, claim.attempt, claim.lease_token)
        try:
            given_back = await lane.unclaims.submit(unclaim)
        except (StoreError, TimeoutError) as exc:
            # Its lease, counted from the due instant, lapses and the reaper retries the run.
            event("run.give_back_failed", logging.WARNING, **ctx, error=_describe(exc))
            return AttemptReport("give_back_failed")
        event("run.given_back", logging.DEBUG, **ctx, unclaimed=given_back)
        return AttemptReport("given_back")

    # execute ------------------------------------------------------------------------------
    async def _execute_leased(
        self, run: RunEvent, claim: Claim, lease: HeldLease
    ) -> AttemptOutcome | Literal["lost", "handed_back"]:
        """The target's outcome; ``lost`` if the lease was lost, ``handed_back`` if the worker
        is stopping (either way the execution was cancelled)."""
        if self._handing_back:  # claimed while the worker stops: do not start the work
            return "handed_back"
        # The target is called in this task, not in a task of its own (one task per call cost
        # its creation and two more steps of the event loop, in a spike's every call): a lost
        # lease or a hand-back cancels this task while, and only while, the call is under way.
        task = asyncio.current_task()
        assert task is not None
        under_way, interrupted = True, False

        def interrupt(_: object = None) -> None:
            # Scheduled callbacks can run after the call ended: then there is nothing to stop.
            nonlocal interrupted
            if under_way and not interrupted:
                interrupted = True
                task.cancel()

        # A callback and a set rather than asyncio.wait over the three: this runs once per
        # attempt, and a wait costs a waiter and three callbacks added and removed each time.
        lease.lost.add_done_callback(interrupt)
        executing = self._executing
        executing.add(interrupt)
        try:
            try:
                return await self._targets.execute(run, claim)
            finally:
                under_way = False
                lease.lost.remove_done_callback(interrupt)
                executing.discard(interrupt)
        except asyncio.CancelledError:
            # Ours (a lost lease, a hand-back), unless the task was cancelled from outside
            # too (a forced stop): that one goes on.
            if not interrupted or task.uncancel() > 0:
                raise
        except Exception as exc:  # an executor bug must not leave the run running
            return self._executor_error(run, claim, exc)
        if not lease.lost.done():
            return "handed_back"
        reason = lease.lost.result()
        event("lease.lost", logging.WARNING, **_context(run, claim.attempt), reason=reason)
        return "lost"

    def _executor_error(self, run: RunEvent, claim: Claim, error: Exception) -> AttemptOutcome:
        """An executor's bug fails the attempt (retryable, so a fixed worker gets another
        chance), instead of leaving the run running until its lease expires, and says why."""
        event(
            "run.executor_error",
            logging.ERROR,
            **_context(run, claim.attempt),
            error=repr(error),
        )
        return retryable(f"internal worker error: {type(error).__name__}")

    # complete -----------------------------------------------------------------------------
    async def _finish(
        self,
        lane: StoreLane,
        run: RunEvent,
        claim: Claim,
        lease: HeldLease,
        completion: Completion,
    ) -> AttemptReport:
        ctx = _context(run, claim.attempt)
        if completion.outcome == "failed":
            event(
                "run.failed",
                logging.DEBUG,
                **ctx,
                error=completion.error,
                status_code=completion.status_code,
            )
        if lease.clock.remaining(self._monotonic()) <= 0:
            # The local lease deadline passed while the attempt ran (a stalled process, a long
            # pause): the reaper may already have given the run to another worker, so this one
            # fences itself instead of sending a completion the database would refuse.
            event("lease.lost", logging.WARNING, **ctx, reason="lease ran out before completion")
            self._announce(
                run, claim, "fenced", UNKNOWN_STATE, completion.error, completion.status_code
            )
            return AttemptReport("lease_lost")
        accepted = await self._complete(lane, lease, completion)
        if accepted is None:
            event("run.completion_failed", logging.ERROR, **ctx, state=completion.state)
            return AttemptReport("completion_failed")
        if not accepted:
            event("run.completion_fenced", logging.WARNING, **ctx, state=completion.state)
            self._announce(
                run, claim, "fenced", UNKNOWN_STATE, completion.error, completion.status_code
            )
            return AttemptReport("completion_fenced")
        if completion.state == "running":
            # No result: the attempt goes on at the target. The heartbeat makes the reaper watch
            # the new lease; its expiry is this host's estimate, and the reaper asks the
            # database before it ends anything.
            self._events.heartbeat(
                RunHeartbeat(
                    run_id=run.run_id,
                    scheduled_for=run.scheduled_for,
                    attempt=claim.attempt,
                    worker=self._config.worker_id,
                    lease_expires_at=self._now() + run.lease,
                    sent_at=self._now(),
                )
            )
            event("run.handed_to_target", logging.DEBUG, **ctx)
            return AttemptReport("handed_to_target")
        self._announce(
            run,
            claim,
            completion.outcome,
            completion.state,
            completion.error,
            completion.status_code,
        )
        if completion.outcome == "handed_back":
            event("run.handed_back", logging.INFO, **ctx, state=completion.state)
            return AttemptReport("handed_back")
        if completion.state == "succeeded":
            event("run.succeeded", logging.DEBUG, **ctx, status_code=completion.status_code)
            return AttemptReport("succeeded")
        if completion.state == "scheduled":
            delay_ms = int(completion.retry_delay / timedelta(milliseconds=1))
            event("run.retry_scheduled", logging.DEBUG, **ctx, retry_in_ms=delay_ms)
            return AttemptReport("retry_scheduled")
        event("run.dead", logging.WARNING, **ctx, error=completion.error)
        return AttemptReport("dead")

    async def _complete(
        self, lane: StoreLane, lease: HeldLease, completion: Completion
    ) -> bool | None:
        """True = accepted, False = fenced, None = never reached the database."""
        run, claim = lease.run, lease.claim
        end = AttemptEnd(
            run_id=run.run_id,
            scheduled_for=run.scheduled_for,
            attempt=claim.attempt,
            lease_token=claim.lease_token,
            state=completion.state,
            outcome=completion.outcome,
            error=completion.error,
            status_code=completion.status_code,
            retry_delay=completion.retry_delay,
            lease=run.lease if completion.state == "running" else timedelta(0),
            started_at=lease.started_at,
        )
        pause = _COMPLETE_RETRY_FIRST
        while True:
            # Past the local deadline the lease is (about to be) gone and the reaper takes over,
            # so no try, the first included, may wait beyond it: a statement that hangs would
            # otherwise hold the attempt for db_call_timeout after its lease.
            remaining = lease.clock.remaining(self._monotonic())
            if remaining <= 0:
                return None
            try:
                return await lane.completions.submit(end, within=remaining)
            except (StoreError, TimeoutError) as exc:
                event(
                    "run.completion_error",
                    logging.WARNING,
                    **_context(run, claim.attempt),
                    error=_describe(exc),
                )
            await asyncio.sleep(min(pause, lease.clock.remaining(self._monotonic())))
            pause = min(pause * 2, _COMPLETE_RETRY_MAX)

    # announce -----------------------------------------------------------------------------
    def _announce(
        self,
        run: RunEvent,
        claim: Claim,
        outcome: str,
        state: str,
        error: str | None,
        status_code: int | None = None,
    ) -> None:
        self._events.result(
            RunResult(
                run_id=run.run_id,
                job_id=run.job_id,
                tenant=run.tenant,
                target_service=run.target_service,
                scheduled_for=run.scheduled_for,
                attempt=claim.attempt,
                worker=self._config.worker_id,
                outcome=outcome,
                state=state,
                started_at=claim.claimed_at,
                finished_at=self._now(),
                error=error,
                status_code=status_code,
            )
        )


def _settle(wave: asyncio.Future[None] | None) -> None:
    if wave is not None and not wave.done():
        wave.set_result(None)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "database call exceeded its deadline"
    return str(exc) or type(exc).__name__
