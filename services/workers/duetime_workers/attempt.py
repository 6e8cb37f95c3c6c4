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

The ``AttemptReport`` says what happened and whether the Kafka offset may be committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from duetime.aio import wait_event
from duetime.errors import StoreError
from duetime.events import RunHeartbeat, RunResult
from duetime.model import RunEvent
from duetime.schedule import retry_delay
from duetime.store import AttemptEnd, Claim, ClaimRequest

from .blocking import BlockingCalls
from .config import WorkerConfig
from .decision import Completion, decide, hand_back
from .lanes import ClusterRunStores, StoreLane, build_lanes
from .logs import event
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
]

# The state recorded on a RunResult when this worker does not know it: it lost the lease, so
# whoever holds the run now (the reaper, another worker) decides what the run becomes.
UNKNOWN_STATE = "unknown"
_CANCEL_WAIT = 5.0
_CLAIM_RETRY_FIRST = 0.2
_CLAIM_RETRY_MAX = 5.0
_COMPLETE_RETRY_FIRST = 0.1
_COMPLETE_RETRY_MAX = 1.0


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
        # One future shared by every attempt (waiting on it costs no task per attempt).
        self._handing_back: asyncio.Future[None] | None = None
        timeout = config.db_call_timeout.total_seconds()

        def lane(cluster_store: RunStore) -> StoreLane:
            return StoreLane(
                cluster_store,
                worker=config.worker_id,
                events=events,
                calls=calls,
                timeout=timeout,
                monotonic=monotonic,
                now=now,
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

    def hand_back(self) -> None:
        """Stop every attempt that is executing and hand its run back (retried at once)."""
        handing_back = self._hand_back_future()
        if not handing_back.done():
            handing_back.set_result(None)

    def _hand_back_future(self) -> asyncio.Future[None]:
        if self._handing_back is None:
            self._handing_back = asyncio.get_running_loop().create_future()
        return self._handing_back

    async def stop(self) -> None:
        for lane in self.lanes:
            await lane.stop()

    async def run(
        self, run: RunEvent, released_at: datetime | None = None, throttled_ms: int | None = None
    ) -> AttemptReport:
        """One attempt of ``run``: claim, execute under the lease, complete. ``released_at`` and
        ``throttled_ms`` are the dispatcher's stamps on the record, recorded by the claim."""
        lane = self._lane(run)
        claimed = await self._claim(lane, run, released_at, throttled_ms)
        if isinstance(claimed, AttemptReport):
            return claimed
        claim, sent_at = claimed
        ctx = _context(run, claim.attempt)
        event("run.claimed", logging.DEBUG, **ctx, target_service=run.target_service)
        lease = lane.leases.hold(run, claim, sent_at)
        try:
            outcome = await self._execute_leased(run, claim, lease)
        finally:
            # Renewals stop with the execution: a completion that cannot reach the database
            # is retried only until the lease runs out, then the reaper takes over.
            lane.leases.release(lease)
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

    # claim --------------------------------------------------------------------------------
    async def _claim(
        self,
        lane: StoreLane,
        run: RunEvent,
        released_at: datetime | None,
        throttled_ms: int | None,
    ) -> tuple[Claim, float] | AttemptReport:
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

    # execute ------------------------------------------------------------------------------
    async def _execute_leased(
        self, run: RunEvent, claim: Claim, lease: HeldLease
    ) -> AttemptOutcome | Literal["lost", "handed_back"]:
        """The target's outcome; ``lost`` if the lease was lost, ``handed_back`` if the worker
        is stopping (either way the execution was cancelled)."""
        handing_back = self._hand_back_future()
        if handing_back.done():  # claimed while the worker stops: do not start the work
            return "handed_back"
        execution = asyncio.ensure_future(self._targets.execute(run, claim))

        def interrupt(_: object) -> None:
            execution.cancel()  # nothing if it is done already

        # Callbacks rather than asyncio.wait over the three: this runs once per attempt, and
        # a wait costs a waiter and three callbacks added and removed each time.
        lease.lost.add_done_callback(interrupt)
        handing_back.add_done_callback(interrupt)
        try:
            await execution  # our own cancellation (a forced stop) cancels the execution too
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:  # an executor bug: _outcome_of fails the attempt with it
            pass
        finally:
            lease.lost.remove_done_callback(interrupt)
            handing_back.remove_done_callback(interrupt)
        if execution.done() and not execution.cancelled():
            return self._outcome_of(run, claim, execution)
        await asyncio.wait({execution}, timeout=_CANCEL_WAIT)
        if not lease.lost.done():
            return "handed_back"
        reason = lease.lost.result()
        event("lease.lost", logging.WARNING, **_context(run, claim.attempt), reason=reason)
        return "lost"

    def _outcome_of(
        self, run: RunEvent, claim: Claim, task: asyncio.Future[AttemptOutcome]
    ) -> AttemptOutcome:
        error = task.exception()
        if error is None:
            return task.result()
        # An executor bug must not leave the run running until its lease expires: fail the
        # attempt (retryable, so a fixed worker gets another chance) and say why.
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "database call exceeded its deadline"
    return str(exc) or type(exc).__name__
