"""The worker with several PostgreSQL clusters: one lane (batchers + renewer) per cluster.

Two in-memory ``RunStore``s stand in for two clusters; the job id decides a run's cluster. The
real stores' version of these tests is tests/integration/test_clusters_worker.py.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from duetime.model import HttpTarget, RunEvent
from duetime.store import Claim
from duetime_workers.attempt import AttemptRunner
from duetime_workers.blocking import BlockingCalls
from duetime_workers.config import WorkerConfig
from duetime_workers.lanes import ClusterRunStores
from duetime_workers.outcome import AttemptOutcome, OutcomeKind
from tests.fakes.run_store import FakeStore
from tests.unit.test_worker_attempt import FakeEvents, _until

SCHEDULED = datetime(2026, 1, 1, tzinfo=UTC)
OK = AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=200)
CLUSTER_OF = {"job-a": 0, "job-b": 1}


def _run(job_id: str, lease_s: float = 30.0, hb_s: float = 10.0) -> RunEvent:
    return RunEvent(
        run_id=uuid.uuid4(),
        job_id=job_id,
        tenant="acme",
        scheduled_for=SCHEDULED,
        due_at=SCHEDULED,
        attempt=1,
        max_attempts=3,
        target_service="svc",
        target=HttpTarget(url="https://example.com/hook"),
        lease=timedelta(seconds=lease_s),
        heartbeat_interval=timedelta(seconds=hb_s),
    )


class GatedTargets:
    """Succeeds once the job's gate opens (a job without a gate succeeds at once)."""

    def __init__(self, gates: dict[str, asyncio.Event] | None = None) -> None:
        self.gates = gates or {}

    async def prewarm(self, run: RunEvent, count: int) -> int:
        return 0

    async def execute(self, run: RunEvent, claim: Claim) -> AttemptOutcome:
        gate = self.gates.get(run.job_id)
        if gate is not None:
            await gate.wait()
        return OK


@pytest.fixture
async def calls() -> AsyncIterator[BlockingCalls]:
    pool = BlockingCalls(max_workers=8, name="test-db")
    yield pool
    pool.shutdown()


async def _started(
    stores: tuple[FakeStore, FakeStore], targets: GatedTargets, calls: BlockingCalls
) -> AttemptRunner:
    runner = AttemptRunner(
        config=WorkerConfig(worker_id="w-test"),
        store=ClusterRunStores(stores, CLUSTER_OF.__getitem__),
        events=FakeEvents(),
        targets=targets,
        calls=calls,
        stopping=asyncio.Event(),
    )
    runner.start()
    return runner


async def test_each_run_is_claimed_and_completed_in_its_own_cluster(
    calls: BlockingCalls,
) -> None:
    stores = (FakeStore(), FakeStore())
    runner = await _started(stores, GatedTargets(), calls)
    runs = [_run("job-a") for _ in range(5)] + [_run("job-b") for _ in range(7)]
    try:
        reports = await asyncio.gather(*(runner.run(run) for run in runs))
    finally:
        await runner.stop()
    assert {report.status for report in reports} == {"succeeded"}
    for index, store in enumerate(stores):
        mine = {run.run_id for run in runs if CLUSTER_OF[run.job_id] == index}
        assert set(store.runs) == mine  # claimed here, and nothing else was asked here
        assert {end.run_id for end in store.completions} == mine
    # The twelve attempts started together: a statement per cluster, not one per run.
    assert stores[0].claim_calls < 5 and stores[1].claim_calls < 7


async def test_leases_are_renewed_in_their_own_cluster(calls: BlockingCalls) -> None:
    stores = (FakeStore(), FakeStore())
    gates = {"job-a": asyncio.Event(), "job-b": asyncio.Event()}
    targets = GatedTargets(gates)
    runner = await _started(stores, targets, calls)
    run_a, run_b = _run("job-a", lease_s=1.0, hb_s=0.2), _run("job-b", lease_s=1.0, hb_s=0.2)
    try:
        tasks = [asyncio.create_task(runner.run(run)) for run in (run_a, run_b)]
        await _until(lambda: stores[0].renewals >= 2 and stores[1].renewals >= 2)
        for gate in gates.values():
            gate.set()
        reports = await asyncio.gather(*tasks)
    finally:
        await runner.stop()
    assert [report.status for report in reports] == ["succeeded", "succeeded"]


async def test_a_hung_cluster_does_not_cost_the_other_clusters_their_leases(
    calls: BlockingCalls,
) -> None:
    hang = threading.Event()
    stores = (FakeStore(), FakeStore(heartbeat_hang=hang))
    gate_a = asyncio.Event()
    targets = GatedTargets({"job-a": gate_a, "job-b": asyncio.Event()})
    runner = await _started(stores, targets, calls)
    run_a, run_b = _run("job-a", lease_s=1.0, hb_s=0.2), _run("job-b", lease_s=1.0, hb_s=0.2)
    try:
        task_a = asyncio.create_task(runner.run(run_a))
        # Cluster 1 never answers a renewal: its attempt fences itself at its local deadline...
        report_b = await asyncio.wait_for(runner.run(run_b), 5)
        # ...while cluster 0's lease is renewed all along: held past its own local deadline
        # (three renewals 0.2 s apart outlast the 0.5 s of a 1 s lease), it is not lost.
        await _until(lambda: stores[0].renewals >= 3)
        gate_a.set()
        report_a = await asyncio.wait_for(task_a, 5)
    finally:
        hang.set()
        await runner.stop()
    assert report_b.status == "lease_lost"
    assert report_a.status == "succeeded"
    assert [end.run_id for end in stores[0].completions] == [run_a.run_id]
    assert stores[1].completions == []


def test_cluster_run_stores_need_a_store() -> None:
    with pytest.raises(ValueError, match="at least one store"):
        ClusterRunStores((), CLUSTER_OF.__getitem__)
