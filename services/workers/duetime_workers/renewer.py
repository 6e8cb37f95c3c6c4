"""Keep every lease of a worker process alive with one statement per round; fence the lost ones.

Each claimed attempt is registered here (``hold``) until its completion has landed (``release``).
When renewals fall due, the renewer renews all leases due within the next moment in one
``runs_renew_batch`` (fenced by each lease token) and announces a ``RunHeartbeat`` for each. A
lease whose attempt is still running a second after its claim is announced then too, with the
claim's expiry, so the reaper (which watches leases on ``runs.heartbeats``) knows of it even if
the worker dies before its first renewal; attempts that end sooner, most of them at a spike,
cost the reaper nothing. An attempt loses its lease, and its ``lost`` future is set with the
reason, when either

- the database answers that its token no longer matches (the reaper re-issued the run), or
- no renewal has succeeded before its local deadline (``LeaseClock``), e.g. during a database
  partition where calls hang instead of failing.

The attempt then cancels its execution: the worker stops by itself (self-fencing) instead of
racing the attempt the reaper has started elsewhere. A failed round is retried soon (every second
at most) until the deadlines, since one lost packet must not cost every lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from duetime.aio import wait_event
from duetime.events import RunHeartbeat
from duetime.model import RunEvent
from duetime.store import Claim, LeaseRenewal

from .blocking import BlockingCalls
from .lease import LeaseClock, effective_heartbeat_interval
from .logs import event
from .ports import RunEvents, RunStore

__all__ = ["HeldLease", "LeaseRenewer"]

_RETRY_PAUSE = 1.0
# Leases due for renewal within this fraction of their interval join the current round, so that
# attempts claimed at slightly different moments share statements instead of each getting one.
_COALESCE = 0.25
_IDLE_WAIT = 3600.0
# A lease is announced this long after its claim if its attempt is still running (and no renewal
# has announced it yet). At once would add a heartbeat record per attempt, and the reaper's
# decoding of it and of the result, to every short attempt (about 20 µs in the worker and 75 µs
# in the reaper per run, measured); an attempt whose worker dies sooner is the reaper's scan's.
_FIRST_ANNOUNCEMENT = 1.0


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False)
class HeldLease:
    """One claimed attempt's lease as the worker sees it."""

    run: RunEvent
    claim: Claim
    clock: LeaseClock
    interval: float
    next_at: float
    lost: asyncio.Future[str] = field(repr=False)
    announce_at: float | None = None  # when to announce it unless a renewal has; None: announced
    # When the call of an attempt claimed ahead started (database clock, as estimated); its
    # completion records it as the attempt's start. None: the claim's time is the start.
    started_at: datetime | None = None


class LeaseRenewer:
    """Renews the leases of all attempts in flight in this process; see the module docstring."""

    def __init__(
        self,
        *,
        store: RunStore,
        events: RunEvents,
        calls: BlockingCalls,
        worker: str,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._store = store
        self._events = events
        self._calls = calls
        self._worker = worker
        self._monotonic = monotonic
        self._now = now
        self._leases: set[HeldLease] = set()
        self._wake = asyncio.Event()
        self._wake_at = 0.0  # when the loop plans to look again (monotonic; 0: it will look)
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # renewal statements sent

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def hold(self, run: RunEvent, claim: Claim, sent_at: float) -> HeldLease:
        """Start keeping ``claim`` alive; its lease counts from ``sent_at`` (monotonic; for a
        claim ahead, the due instant). It is announced a second after it is held if its
        attempt still runs then (a run claimed ahead may be held well after its due instant,
        when the due gate lets it through)."""
        interval = effective_heartbeat_interval(run.lease, run.heartbeat_interval).total_seconds()
        announce_at = max(sent_at, self._monotonic()) + _FIRST_ANNOUNCEMENT
        lease = HeldLease(
            run=run,
            claim=claim,
            clock=LeaseClock.start(run.lease, sent_at),
            interval=interval,
            next_at=sent_at + interval,
            lost=asyncio.get_running_loop().create_future(),
            announce_at=announce_at,
        )
        self._leases.add(lease)
        # Wake the loop only if this lease needs it sooner than it planned to wake: a spike
        # holds leases by the thousand, and each wake looks at every lease held.
        if min(lease.next_at, lease.clock.deadline, announce_at) < self._wake_at:
            self._wake.set()
        return lease

    def release(self, lease: HeldLease) -> None:
        """Stop keeping ``lease`` (its attempt has ended)."""
        self._leases.discard(lease)

    @property
    def held(self) -> int:
        """Leases being kept now."""
        return len(self._leases)

    # the loop ---------------------------------------------------------------------------------
    async def _serve(self) -> None:
        while True:
            self._wake.clear()
            now = self._monotonic()
            wait = self._until_next(now)
            if wait > 0:
                self._wake_at = now + wait
                await wait_event(self._wake, wait)
                continue
            self._wake_at = 0.0  # a round runs: the look after it sees what is held meanwhile
            await self.run_once()

    def _until_next(self, now: float) -> float:
        if not self._leases:
            return _IDLE_WAIT
        wake = min(
            min(
                lease.next_at,
                lease.clock.deadline,
                lease.next_at if lease.announce_at is None else lease.announce_at,
            )
            for lease in self._leases
        )
        return wake - now

    async def run_once(self) -> int:
        """Fence what passed its local deadline, announce the leases held for a second, renew
        what is due; returns leases renewed."""
        now = self._monotonic()
        for lease in [lease for lease in self._leases if lease.clock.expired(now)]:
            self._lose(lease, "no lease renewal succeeded before the local deadline")
        for lease in self._leases:
            if lease.announce_at is not None and lease.announce_at <= now:
                self._announce(lease, lease.claim.lease_expires_at)
        due = [lease for lease in self._leases if lease.next_at - lease.interval * _COALESCE <= now]
        if not due:
            return 0
        sent_at = self._monotonic()
        deadline = min(
            min(lease.interval for lease in due),
            max(lease.clock.remaining(sent_at) for lease in due),
        )
        self.rounds += 1
        try:
            renewed = await self._calls.call(
                deadline,
                self._store.runs_renew_batch,
                [
                    LeaseRenewal(
                        lease.run.run_id,
                        lease.run.scheduled_for,
                        lease.claim.lease_token,
                        lease.run.lease,
                    )
                    for lease in due
                ],
            )
        except Exception as exc:  # StoreError, TimeoutError: keep the leases, try again soon
            retry_at = self._monotonic() + _RETRY_PAUSE
            for lease in due:
                lease.next_at = min(retry_at, lease.next_at + lease.interval)
            event(
                "lease.renew_failed",
                logging.WARNING,
                leases=len(due),
                error=str(exc) or type(exc).__name__,
            )
            return 0
        count = 0
        for lease in due:
            if lease not in self._leases:
                continue  # its attempt ended while the statement was in flight
            expires_at = renewed.get(lease.claim.lease_token)
            if expires_at is None:
                self._lose(lease, "the lease token no longer matches (the run was re-issued)")
                continue
            lease.clock.renewed(sent_at)
            lease.next_at = sent_at + lease.interval
            count += 1
            self._announce(lease, expires_at)
        return count

    def _announce(self, lease: HeldLease, expires_at: datetime) -> None:
        lease.announce_at = None
        self._events.heartbeat(
            RunHeartbeat(
                run_id=lease.run.run_id,
                scheduled_for=lease.run.scheduled_for,
                attempt=lease.claim.attempt,
                worker=self._worker,
                lease_expires_at=expires_at,
                sent_at=self._now(),
            )
        )

    def _lose(self, lease: HeldLease, reason: str) -> None:
        self._leases.discard(lease)
        if not lease.lost.done():
            lease.lost.set_result(reason)
