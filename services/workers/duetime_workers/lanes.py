"""One lane of database work per PostgreSQL cluster: its claim and completion batchers and its
lease renewer.

A run lives in the cluster of its job's shard (``duetime.shard_map``), so every statement about
it (claim, renewals, completion) goes to that cluster. Rather than one batch split inside each
call, each cluster gets a lane of its own: the batches of one cluster's attempts form on their
own, go out as one statement each, and fail on their own. A cluster that is down then stalls
only its own runs' claims and renewals; the leases held in the other clusters keep being renewed
(a batch split inside one call would fail, or wait for, every cluster's part at once).

With one cluster there is one lane and the attempt takes it without looking at the run: the
single-cluster path does exactly what it did before lanes existed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from duetime.store import AttemptEnd, Claim, ClaimDeferred, ClaimRequest, Unclaim

from .batcher import StatementBatcher
from .blocking import BlockingCalls
from .due_clock import DueClock
from .metrics import WorkerMetrics
from .ports import RunEvents, RunStore
from .renewer import LeaseRenewer

__all__ = ["ClusterRunStores", "StoreLane", "build_lanes"]


@dataclass(frozen=True)
class ClusterRunStores:
    """One ``RunStore`` per cluster (index = cluster index of the shard map) and
    ``cluster_of_job(job_id)``, the index of the cluster holding a job's runs."""

    stores: Sequence[RunStore]
    cluster_of_job: Callable[[str], int]

    def __post_init__(self) -> None:
        if not self.stores:
            raise ValueError("ClusterRunStores needs at least one store")


class StoreLane:
    """The batched statements of one cluster: ``claims``, ``completions``, ``leases`` and
    ``unclaims`` (the claims ahead given back at a stop). A claim statement's database time is
    a sample for ``due_clock``."""

    def __init__(
        self,
        store: RunStore,
        *,
        worker: str,
        events: RunEvents,
        calls: BlockingCalls,
        timeout: float,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime],
        due_clock: DueClock,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        def claim(requests: Sequence[ClaimRequest]) -> list[Claim | ClaimDeferred | None]:
            claims = store.runs_claim_batch(worker, requests)
            for made in claims.values():
                if isinstance(made, Claim):
                    due_clock.observe(made.claimed_at)  # one now() per statement: one sample
                    break
            if metrics is not None:
                metrics.count_claims(len(claims))  # per statement, never per run
            return [claims.get(request.lease_token) for request in requests]

        def unclaim(unclaims: Sequence[Unclaim]) -> list[bool]:
            given_back = store.runs_unclaim_batch(unclaims)
            return [u.lease_token in given_back for u in unclaims]

        def complete(ends: Sequence[AttemptEnd]) -> list[bool]:
            accepted = store.runs_complete_batch(worker, ends)
            results = [end.lease_token in accepted for end in ends]
            if metrics is not None:
                metrics.count_ends(ends, results)  # per statement, never per run
            return results

        self.claims: StatementBatcher[ClaimRequest, Claim | ClaimDeferred | None] = (
            StatementBatcher(claim, calls, timeout=timeout)
        )
        self.unclaims: StatementBatcher[Unclaim, bool] = StatementBatcher(
            unclaim, calls, timeout=timeout
        )
        self.completions: StatementBatcher[AttemptEnd, bool] = StatementBatcher(
            complete, calls, timeout=timeout
        )

        def probe_clock() -> None:
            # The sample is taken on the database thread, right after the answer: a claim's
            # now() is the start of a statement that may take long in a spike, this is not.
            due_clock.observe(store.db_clock())

        self._probe_clock = probe_clock
        self._calls, self._timeout = calls, timeout
        self.leases = LeaseRenewer(
            store=store, events=events, calls=calls, worker=worker, monotonic=monotonic, now=now
        )

    async def probe_clock(self) -> None:
        """Read the database clock once, for the due clock (raises what the call raises)."""
        await self._calls.call(self._timeout, self._probe_clock)

    def start(self) -> None:
        self.claims.start()
        self.completions.start()
        self.unclaims.start()
        self.leases.start()

    async def stop(self) -> None:
        await self.leases.stop()
        await self.claims.stop()
        await self.completions.stop()
        await self.unclaims.stop()


def build_lanes(
    store: RunStore | ClusterRunStores, make: Callable[[RunStore], StoreLane]
) -> tuple[tuple[StoreLane, ...], Callable[[str], int] | None]:
    """``make``'s lane for each cluster of ``store`` and the job id -> lane index routing
    (None: one lane, nothing to route)."""
    if isinstance(store, ClusterRunStores):
        lanes = tuple(make(s) for s in store.stores)
        return lanes, (store.cluster_of_job if len(lanes) > 1 else None)
    return (make(store),), None
