"""A stopping worker hands its in-flight attempts back: cancelled, and due again at once.

The attempt pipeline with in-memory ports, as in test_worker_attempt.py (whose fakes it uses).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from duetime_workers.blocking import BlockingCalls
from duetime_workers.decision import hand_back
from tests.fakes.run_store import FakeStore
from tests.unit.test_worker_attempt import OK, FakeEvents, FakeTargets, _run, _runner, _until
from tests.unit.test_worker_attempt import calls as calls  # the fixture

__all__ = ["calls"]


def test_a_handed_back_attempt_is_due_at_once_and_counts() -> None:
    again = hand_back(attempt=1, max_attempts=3)
    assert (again.state, again.outcome, again.retry_delay) == (
        "scheduled",
        "handed_back",
        timedelta(0),
    )
    assert again.error == "worker stopped during the attempt"
    last = hand_back(attempt=3, max_attempts=3)
    assert (last.state, last.outcome) == ("dead", "handed_back")


async def test_hand_back_cancels_executions_and_ends_them_in_one_statement(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    runner = _runner(store, events, targets, calls)
    runs = [_run(lease_s=30, hb_s=10) for _ in range(4)] + [_run(max_attempts=1, lease_s=30)]
    tasks = [asyncio.create_task(runner.run(run)) for run in runs]
    await _until(lambda: len(targets.calls) == len(runs))
    statements_before = store.complete_calls
    runner.hand_back()
    reports = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert {(r.status, r.commit) for r in reports} == {("handed_back", True)}
    assert targets.cancelled
    assert store.complete_calls - statements_before == 1  # one batched, fenced statement
    ends = {end.run_id: end for end in store.completions}
    assert store.fenced == []
    for run in runs[:4]:
        end = ends[run.run_id]
        assert (end.state, end.outcome, end.retry_delay, end.attempt) == (
            "scheduled",
            "handed_back",
            timedelta(0),
            1,
        )
        assert (store.runs[run.run_id].state, store.runs[run.run_id].token) == ("scheduled", None)
    assert ends[runs[4].run_id].state == "dead"  # its only attempt is spent
    results = {r.run_id: r for r in events.results}
    assert (results[runs[0].run_id].outcome, results[runs[0].run_id].state) == (
        "handed_back",
        "scheduled",
    )


async def test_an_attempt_claimed_after_the_hand_back_does_not_execute(
    calls: BlockingCalls,
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK)
    runner = _runner(store, events, targets, calls)
    runner.hand_back()
    run = _run(lease_s=30)
    report = await asyncio.wait_for(runner.run(run), timeout=10)
    assert report.status == "handed_back"
    assert targets.calls == []
    assert store.runs[run.run_id].state == "scheduled"


async def test_a_hand_back_whose_reply_was_lost_is_recognised(calls: BlockingCalls) -> None:
    store, events = FakeStore(complete_lost_replies=1), FakeEvents()
    targets = FakeTargets(OK, hold=True)
    runner = _runner(store, events, targets, calls)
    task = asyncio.create_task(runner.run(_run(lease_s=30)))
    await targets.started.wait()
    runner.hand_back()
    report = await asyncio.wait_for(task, timeout=10)
    assert report.status == "handed_back"
    assert len(store.completions) == 1 and store.fenced == []


async def test_a_lost_lease_wins_over_a_hand_back(calls: BlockingCalls) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(OK, hold=True)
    runner = _runner(store, events, targets, calls)
    run = _run(hb_s=0.05)
    task = asyncio.create_task(runner.run(run))
    await targets.started.wait()
    store.steal(run.run_id)
    report = await asyncio.wait_for(task, timeout=5)
    runner.hand_back()
    assert report.status == "lease_lost"
    assert store.completions == []
