"""One contract for the planner's store port, run against its in-memory twin and PostgreSQL.

tests/unit/test_planner_round.py plans against the twin (tests/fakes/planner_store.py); this
suite is what makes that trust earned for the statements a round relies on beyond the fence
(tests/integration/test_shard_fence.py): the due scan (shards, horizon, order, limit, paused),
run inserts that create each occurrence once, job advances, the outbox (unpublished runs due
within the horizon, marked published once) and the publications a round settles or any planner
recovers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from duetime.jobdef import parse_jobs
from duetime.model import run_id_for
from duetime.sharding import shard_for
from duetime.store import NewRun, Store
from duetime.store.jobs import jobs_apply
from duetime.store.rows import DueJob
from duetime_planner.ports import PlannerStore
from tests.fakes.planner_store import FakePlannerStore, due_job

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
JOBS = ["c-0", "c-1", "c-2", "c-3"]


def _definition(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "tenant": "t",
        "schedule": {"interval": "PT10S"},
        "target": {"http": {"url": "https://example.test/hook"}},
        "target_service": "svc",
    }


class _Contract:
    """Sets up the same jobs in either store, due at given instants."""

    def __init__(self, store: PlannerStore, set_due: Any, pause: Any, tick: Any) -> None:
        self.store = store
        self.set_due = set_due
        self.pause = pause
        self.tick = tick  # the database clock moves on


@pytest.fixture(params=["fake", "postgres"])
def contract(request: pytest.FixtureRequest) -> Iterator[_Contract]:
    if request.param == "fake":
        fake = FakePlannerStore(T0)
        for job_id in JOBS:
            fake.add_job(due_job(job_id, next_run_at=T0))

        def fake_due(job_id: str, when: datetime) -> None:
            fake.state.jobs[job_id] = replace(fake.job(job_id), next_run_at=when)

        def fake_pause(job_id: str) -> None:
            fake.state.paused.add(job_id)  # the state a transaction committed last

        def fake_tick() -> None:
            fake.clock += timedelta(seconds=1)

        yield _Contract(fake, fake_due, fake_pause, fake_tick)
        return
    real = Store(request.getfixturevalue("database_url"), pool_size=2)
    with real.tx() as tx:
        jobs_apply(tx, parse_jobs([_definition(j) for j in JOBS]))
        tx.runs_ensure_partition(T0.date())

    def real_due(job_id: str, when: datetime) -> None:
        with real.engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET next_run_at = :w WHERE job_id = :j"), {"w": when, "j": job_id}
            )

    def real_pause(job_id: str) -> None:
        with real.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true WHERE job_id = :j"), {"j": job_id})

    try:
        yield _Contract(real, real_due, real_pause, lambda: time.sleep(0.01))
    finally:
        real.close()


def _ids(jobs: list[DueJob]) -> list[str]:
    return [j.job_id for j in jobs]


def test_the_due_scan_takes_the_oldest_due_jobs_of_the_given_shards(contract: _Contract) -> None:
    for n, job_id in enumerate(JOBS):
        contract.set_due(job_id, T0 + timedelta(seconds=n))
    every = [shard_for(j) for j in JOBS]
    with contract.store.tx() as tx:
        assert _ids(tx.jobs_get_due_batch(every, T0 + timedelta(seconds=2), 10)) == JOBS[:3]
        assert _ids(tx.jobs_get_due_batch(every, T0 + timedelta(hours=1), 2)) == JOBS[:2]
        only = [shard_for("c-3")]
        assert _ids(tx.jobs_get_due_batch(only, T0 + timedelta(hours=1), 10)) == ["c-3"]
        due = tx.jobs_get_due_batch(every, T0 + timedelta(hours=1), 10)
        assert {j.job_id: j.shard_id for j in due} == {j: shard_for(j) for j in JOBS}
    contract.pause("c-0")
    with contract.store.tx() as tx:
        assert "c-0" not in _ids(tx.jobs_get_due_batch(every, T0 + timedelta(hours=1), 10))


def test_an_occurrence_is_inserted_once_and_advances_move_the_job(contract: _Contract) -> None:
    contract.set_due("c-1", T0)
    run = NewRun(run_id_for("c-1", T0), "c-1", "t", "svc", T0, T0, 3, shard_for("c-1"))
    with contract.store.tx() as tx:
        assert tx.runs_insert_many([run]) == {run.run_id}
        assert tx.runs_insert_many([run]) == set()
        assert tx.jobs_advance_many([("c-1", T0 + timedelta(seconds=10), T0)]) == 1
    with contract.store.tx() as tx:
        due = tx.jobs_get_due_batch([shard_for("c-1")], T0 + timedelta(seconds=5), 10)
        assert "c-1" not in _ids(due)
        due = tx.jobs_get_due_batch([shard_for("c-1")], T0 + timedelta(seconds=10), 10)
        moved = [(j.next_run_at, j.last_scheduled_for) for j in due if j.job_id == "c-1"]
        assert moved == [(T0 + timedelta(seconds=10), T0)]


def test_the_outbox_returns_unpublished_runs_due_within_the_horizon_once(
    contract: _Contract,
) -> None:
    runs = [
        NewRun(
            run_id_for("c-2", T0 + timedelta(seconds=s)),
            "c-2",
            "t",
            "svc",
            T0 + timedelta(seconds=s),
            T0 + timedelta(seconds=s),
            3,
            shard_for("c-2"),
        )
        for s in (0, 10, 20)
    ]
    with contract.store.tx() as tx:
        tx.runs_insert_many(runs)
    with contract.store.tx() as tx:
        out = tx.runs_get_unpublished(T0 + timedelta(seconds=10), 10)
        assert [r.run_id for r in out] == [runs[0].run_id, runs[1].run_id]
        assert out[0].attempt == 0 and out[0].target is not None
        keys = [(r.run_id, r.scheduled_for) for r in out]
        assert tx.runs_mark_published_many(keys) == 2
        assert tx.runs_mark_published_many(keys) == 0
    with contract.store.tx() as tx:
        assert [r.run_id for r in tx.runs_get_unpublished(T0 + timedelta(hours=1), 10)] == [
            runs[2].run_id
        ]


def _runs(job_id: str, seconds: tuple[int, ...], published: bool) -> list[NewRun]:
    return [
        NewRun(
            run_id_for(job_id, T0 + timedelta(seconds=s)),
            job_id,
            "t",
            "svc",
            T0 + timedelta(seconds=s),
            T0 + timedelta(seconds=s),
            3,
            shard_for(job_id),
            published=published,
        )
        for s in seconds
    ]


def _unpublished(contract: _Contract) -> set[Any]:
    with contract.store.tx() as tx:
        return {r.run_id for r in tx.runs_get_unpublished(T0 + timedelta(hours=1), 100)}


def test_runs_inserted_for_publishing_stay_marked_unless_their_publication_says_otherwise(
    contract: _Contract,
) -> None:
    marked, beyond = _runs("c-2", (0, 10), True), _runs("c-2", (20,), False)
    with contract.store.tx() as tx:
        created = tx.runs_insert_publishing([*marked, *beyond], None, "planner-a")
    assert created.inserted == {r.run_id for r in [*marked, *beyond]}
    assert created.publication_id is not None
    assert _unpublished(contract) == {beyond[0].run_id}
    with contract.store.tx() as tx:  # existing runs: nothing new, no publication
        again = tx.runs_insert_publishing(marked, None, "planner-a")
    assert (again.inserted, again.publication_id) == (set(), None)
    # The broker acknowledged the first run, not the second: the second goes back to the outbox.
    with contract.store.tx() as tx:
        second = (marked[1].run_id, marked[1].scheduled_for)
        assert tx.publication_settle(created.publication_id, [second]) == 1
    assert _unpublished(contract) == {marked[1].run_id, beyond[0].run_id}
    with contract.store.tx() as tx:  # settled: nothing left to recover
        contract.tick()
        assert tx.publications_recover(timedelta(0)) == 0


def test_a_publication_nobody_settled_is_recovered_once_it_is_old_enough(
    contract: _Contract,
) -> None:
    runs = _runs("c-3", (0, 10, 20), True)
    with contract.store.tx() as tx:
        created = tx.runs_insert_publishing(runs, None, "planner-that-died")
    assert created.publication_id is not None
    assert _unpublished(contract) == set()
    with contract.store.tx() as tx:
        assert tx.publications_recover(timedelta(hours=1)) == 0  # too recent: still in flight
    contract.tick()
    with contract.store.tx() as tx:
        assert tx.publications_recover(timedelta(0)) == 3
    assert _unpublished(contract) == {r.run_id for r in runs}
    with contract.store.tx() as tx:
        assert tx.publications_recover(timedelta(0)) == 0  # recovered once
        # The planner that wrote it, late: its settle finds the row gone and unmarks nothing
        # more than the outbox already holds.
        assert tx.publication_settle(created.publication_id, []) == 0


def test_a_run_batch_keeps_each_run_s_columns_together(database_url: str) -> None:
    """The insert takes the batch column by column (sql/planner.sql): every row gets its own
    values, whatever characters its text holds, and the batch's order is kept."""
    store = Store(database_url, pool_size=1)
    odd = ['q"uote', "com,ma", "{brace}", "back\\slash", "ünï 😀", "NULL", "sp ace", "t\tab"]
    runs = [
        NewRun(
            run_id_for(f"cols-{name}", T0 + timedelta(seconds=n)),
            f"cols-{name}",
            f"tenant-{name}",
            f"svc-{name}",
            T0 + timedelta(seconds=n),
            T0 + timedelta(seconds=n, milliseconds=n),
            n + 1,
            n,
            published=n % 2 == 0,
        )
        for n, name in enumerate(odd)
    ]
    try:
        with store.tx() as tx:
            tx.runs_ensure_partition(T0.date())
            created = tx.runs_insert_publishing(runs, None, "planner-1")
        assert created.inserted == {r.run_id for r in runs}
        with store.engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT run_id, job_id, tenant, target_service, scheduled_for, due_at,"
                    " max_attempts, published_at IS NOT NULL AS published FROM runs"
                    " WHERE job_id LIKE 'cols-%'"
                )
            ).all()
        got = {r.run_id: tuple(r)[1:] for r in rows}
        assert got == {
            r.run_id: (
                r.job_id,
                r.tenant,
                r.target_service,
                r.scheduled_for,
                r.due_at,
                r.max_attempts,
                r.published,
            )
            for r in runs
        }
    finally:
        store.close()
