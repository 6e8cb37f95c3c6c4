"""Keep one attempt's lease alive while it executes; return as soon as it is lost.

Every ``interval`` the keeper renews the lease in PostgreSQL (``runs_heartbeat``, fenced by the
lease token) and announces a ``RunHeartbeat``. It returns, with the reason, when either

- the database answers that the token no longer matches (the reaper re-issued the run), or
- no renewal has succeeded before the local deadline (``LeaseClock``), e.g. during a database
  partition where calls hang instead of failing.

The caller then cancels the execution: the worker stops by itself (self-fencing) instead of
racing the attempt the reaper has started elsewhere. A failed renewal is retried quickly (every
second at most) until the deadline, since one lost packet must not cost the lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from duetime.errors import StoreError
from duetime.events import RunHeartbeat
from duetime.model import RunEvent
from duetime.store import Claim

from .blocking import BlockingCalls
from .lease import LeaseClock
from .logs import event
from .ports import RunEvents, RunStore

__all__ = ["LeaseKeeper"]

_RETRY_PAUSE = timedelta(seconds=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class LeaseKeeper:
    """Renews one claimed attempt's lease until cancelled or the lease is lost."""

    def __init__(
        self,
        *,
        run: RunEvent,
        claim: Claim,
        worker: str,
        clock: LeaseClock,
        interval: timedelta,
        store: RunStore,
        events: RunEvents,
        calls: BlockingCalls,
        monotonic: Callable[[], float],
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._run = run
        self._claim = claim
        self._worker = worker
        self._clock = clock
        self._interval = interval.total_seconds()
        self._store = store
        self._events = events
        self._calls = calls
        self._monotonic = monotonic
        self._now = now

    async def run(self) -> str:
        """Renew until the lease is lost; returns why. Cancel it when the attempt ends."""
        next_at = self._clock.renewed_at + self._interval
        while True:
            now = self._monotonic()
            wake = min(next_at, self._clock.deadline)
            if wake > now:
                await asyncio.sleep(wake - now)
                now = self._monotonic()
            if self._clock.expired(now):
                return "no lease renewal succeeded before the local deadline"
            if now < next_at:
                continue
            renewed = await self._renew(now)
            if renewed is None:
                return "the lease token no longer matches (the run was re-issued)"
            next_at = (
                (now + self._interval)
                if renewed
                else (self._monotonic() + min(self._interval, _RETRY_PAUSE.total_seconds()))
            )

    async def _renew(self, sent_at: float) -> bool | None:
        """True = renewed, False = failed (try again), None = the lease is gone."""
        run = self._run
        try:
            expires_at = await self._calls.call(
                min(self._interval, self._clock.remaining(sent_at)),
                self._store.runs_heartbeat,
                run.run_id,
                run.scheduled_for,
                self._claim.lease_token,
                run.lease,
            )
        except (StoreError, TimeoutError) as exc:
            event(
                "lease.renew_failed",
                logging.WARNING,
                run_id=run.run_id,
                attempt=self._claim.attempt,
                error=str(exc) or type(exc).__name__,
                deadline_in_s=round(self._clock.remaining(self._monotonic()), 3),
            )
            return False
        if expires_at is None:
            return None
        self._clock.renewed(sent_at)
        self._events.heartbeat(
            RunHeartbeat(
                run_id=run.run_id,
                scheduled_for=run.scheduled_for,
                attempt=self._claim.attempt,
                worker=self._worker,
                lease_expires_at=expires_at,
                sent_at=self._now(),
            )
        )
        return True
