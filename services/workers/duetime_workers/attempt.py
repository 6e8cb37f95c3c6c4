"""One run through a worker: claim, execute under a renewed lease, complete (fenced), announce.

::

    RunEvent ──claim CAS──► none ─────────────────────────────► skipped (duplicate / handled)
                 │
                 └► Claim(attempt, lease_token) ─► execute target ─┬► outcome ─► decide ─► complete
                        │                                          │              (fenced CAS)
                        └── LeaseKeeper renews every interval ─────┘
                              lost ─► cancel the execution, do not complete (self-fencing)

Every database call has a client-side deadline (``BlockingCalls``). The claim is retried through
database errors for ``claim_give_up``; after that the record is committed past anyway, because
the planner's sweeper re-publishes runs that stay unclaimed (the database, not Kafka, is what
guarantees a run is not lost). The completion is retried until the local lease deadline; if it
never lands, the lease expires and the reaper schedules the next attempt.

The ``AttemptReport`` says what happened and whether the Kafka offset may be committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from duetime.errors import StoreError
from duetime.events import RunResult
from duetime.model import RunEvent
from duetime.schedule import retry_delay
from duetime.store import Claim

from .blocking import BlockingCalls
from .config import WorkerConfig
from .decision import Completion, decide
from .heartbeat import LeaseKeeper
from .lease import LeaseClock, effective_heartbeat_interval
from .logs import event
from .outcome import AttemptOutcome, retryable
from .ports import RunEvents, RunStore, TargetExecutor

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
    """Runs attempts for one worker process; one ``run()`` call per RunEvent."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        store: RunStore,
        events: RunEvents,
        targets: TargetExecutor,
        calls: BlockingCalls,
        stopping: asyncio.Event,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utc_now,
        backoff: Callable[[RunEvent, int], timedelta] = default_backoff,
    ) -> None:
        self._config = config
        self._store = store
        self._events = events
        self._targets = targets
        self._calls = calls
        self._stopping = stopping
        self._monotonic = monotonic
        self._now = now
        self._backoff = backoff
        self._db_timeout = config.db_call_timeout.total_seconds()

    async def run(self, run: RunEvent) -> AttemptReport:
        claimed = await self._claim(run)
        if isinstance(claimed, AttemptReport):
            return claimed
        claim, sent_at = claimed
        ctx = _context(run, claim.attempt)
        event("run.claimed", **ctx, target_service=run.target_service)
        clock = LeaseClock.start(run.lease, sent_at)
        outcome = await self._execute_leased(run, claim, clock)
        if outcome is None:
            self._announce(run, claim, "fenced", UNKNOWN_STATE, "lease lost")
            return AttemptReport("lease_lost")
        completion = decide(
            outcome, claim.attempt, run.max_attempts, self._backoff(run, claim.attempt)
        )
        return await self._finish(run, claim, clock, completion)

    # claim --------------------------------------------------------------------------------
    async def _claim(self, run: RunEvent) -> tuple[Claim, float] | AttemptReport:
        """The claim and the monotonic time its statement was sent, or why there is none."""
        ctx = _context(run)
        give_up_at = self._monotonic() + self._config.claim_give_up.total_seconds()
        pause = _CLAIM_RETRY_FIRST
        while True:
            sent_at = self._monotonic()
            try:
                claim = await self._calls.call(
                    self._db_timeout,
                    self._store.runs_claim,
                    run.run_id,
                    run.scheduled_for,
                    run.attempt,
                    self._config.worker_id,
                    run.lease,
                )
            except (StoreError, TimeoutError) as exc:
                event("run.claim_error", logging.WARNING, **ctx, error=_describe(exc))
            else:
                if claim is None:
                    event("run.claim_skipped", **ctx)
                    return AttemptReport("claim_skipped")
                return claim, sent_at
            if self._stopping.is_set():
                return AttemptReport("abandoned", commit=False)
            if self._monotonic() + pause > give_up_at:
                event("run.claim_failed", logging.ERROR, **ctx)
                return AttemptReport("claim_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), pause)
            pause = min(pause * 2, _CLAIM_RETRY_MAX)

    # execute ------------------------------------------------------------------------------
    async def _execute_leased(
        self, run: RunEvent, claim: Claim, clock: LeaseClock
    ) -> AttemptOutcome | None:
        """The target's outcome, or None if the lease was lost (execution cancelled)."""
        keeper = LeaseKeeper(
            run=run,
            claim=claim,
            worker=self._config.worker_id,
            clock=clock,
            interval=effective_heartbeat_interval(run.lease, run.heartbeat_interval),
            store=self._store,
            events=self._events,
            calls=self._calls,
            monotonic=self._monotonic,
            now=self._now,
        )
        execution = asyncio.create_task(self._targets.execute(run, claim.attempt))
        keeping = asyncio.create_task(keeper.run())
        try:
            await asyncio.wait({execution, keeping}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also on our own cancellation (shutdown past its grace)
            for task in (execution, keeping):
                task.cancel()
        if execution.done() and not execution.cancelled():
            await asyncio.wait({keeping})
            return self._outcome_of(run, claim, execution)
        reason = "lease keeper failed"
        if not keeping.cancelled():
            error = keeping.exception()
            reason = f"lease keeper failed: {error!r}" if error else str(keeping.result())
        await asyncio.wait({execution}, timeout=_CANCEL_WAIT)
        event("lease.lost", logging.WARNING, **_context(run, claim.attempt), reason=reason)
        return None

    def _outcome_of(
        self, run: RunEvent, claim: Claim, task: asyncio.Task[AttemptOutcome]
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
        self, run: RunEvent, claim: Claim, clock: LeaseClock, completion: Completion
    ) -> AttemptReport:
        ctx = _context(run, claim.attempt)
        if completion.outcome == "failed":
            event(
                "run.failed",
                logging.WARNING,
                **ctx,
                error=completion.error,
                status_code=completion.status_code,
            )
        accepted = await self._complete(run, claim, clock, completion)
        if accepted is None:
            event("run.completion_failed", logging.ERROR, **ctx, state=completion.state)
            return AttemptReport("completion_failed")
        if not accepted:
            event("run.completion_fenced", logging.WARNING, **ctx, state=completion.state)
            self._announce(
                run, claim, "fenced", UNKNOWN_STATE, completion.error, completion.status_code
            )
            return AttemptReport("completion_fenced")
        self._announce(
            run,
            claim,
            completion.outcome,
            completion.state,
            completion.error,
            completion.status_code,
        )
        if completion.state == "succeeded":
            event("run.succeeded", **ctx, status_code=completion.status_code)
            return AttemptReport("succeeded")
        if completion.state == "scheduled":
            delay_ms = int(completion.retry_delay / timedelta(milliseconds=1))
            event("run.retry_scheduled", **ctx, retry_in_ms=delay_ms)
            return AttemptReport("retry_scheduled")
        event("run.dead", logging.WARNING, **ctx, error=completion.error)
        return AttemptReport("dead")

    async def _complete(
        self, run: RunEvent, claim: Claim, clock: LeaseClock, completion: Completion
    ) -> bool | None:
        """True = accepted, False = fenced, None = never reached the database."""
        pause = _COMPLETE_RETRY_FIRST
        while True:
            try:
                accepted: bool = await self._calls.call(
                    self._db_timeout,
                    self._store.runs_complete,
                    run_id=run.run_id,
                    scheduled_for=run.scheduled_for,
                    attempt=claim.attempt,
                    worker=self._config.worker_id,
                    lease_token=claim.lease_token,
                    state=completion.state,
                    outcome=completion.outcome,
                    error=completion.error,
                    status_code=completion.status_code,
                    retry_delay=completion.retry_delay,
                )
                return accepted
            except (StoreError, TimeoutError) as exc:
                event(
                    "run.completion_error",
                    logging.WARNING,
                    **_context(run, claim.attempt),
                    error=_describe(exc),
                )
            # Past the local deadline the lease is (about to be) gone; the reaper takes over.
            remaining = clock.remaining(self._monotonic())
            if remaining <= 0:
                return None
            await asyncio.sleep(min(pause, remaining))
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
