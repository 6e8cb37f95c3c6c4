"""Per-target in-flight limits end to end: planner, dispatcher, worker and reaper as processes.

A target limited to 3 attempts in flight, 9 runs due at once, each holding its request for 2 s:
the target never sees more than 3 at a time, and every run succeeds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from duetime.store import flow
from tests.fixtures.target import RecordingTarget

from .pipeline import TERMINAL, Pipeline, e2e_job, pipeline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

HOLD_S = 2.0


def test_max_in_flight_holds_at_the_target(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    with pipeline.store.tx() as tx:
        flow.set_limits(tx.conn, "slow-target", max_in_flight=3)
    time.sleep(3)  # the dispatcher re-reads limits every 2 s
    due = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
    jobs = [
        e2e_job(
            f"slow-{i}",
            f"{http_target.url}/slow-once-{HOLD_S:g}/slow-{i}",
            schedule={"at": due.isoformat()},
            target_service="slow-target",
        )
        for i in range(9)
    ]
    pipeline.apply(jobs)
    requests = http_target.wait_for("/slow-once-", 9, timeout=60)
    assert len(requests) == 9

    def all_finished() -> bool:
        rows = pipeline.sql(
            "SELECT count(*) AS n FROM runs WHERE job_id LIKE 'slow-%' AND state <> ALL(:t)",
            t=list(TERMINAL),
        )
        return rows[0].n == 0

    pipeline.wait_until("every run to finish", all_finished, timeout=60)
    # Each request is held HOLD_S at the target: never more than 3 inside any such span.
    arrivals = sorted(r.at for r in requests)
    most = max(sum(1 for a in arrivals if t - HOLD_S + 0.05 < a <= t) for t in arrivals)
    assert most <= 3, arrivals
    assert arrivals[-1] - arrivals[0] >= 2 * HOLD_S - 0.5  # three waves, not one
    runs = pipeline.sql(
        "SELECT state, attempt, released_at, throttled_ms FROM runs WHERE job_id LIKE 'slow-%'"
    )
    assert all(r.state == "succeeded" and r.attempt == 1 for r in runs)
    # The later waves were held by the limit, and the run records say for how long.
    assert sum(1 for r in runs if r.throttled_ms and r.throttled_ms >= 1000) >= 3
    assert all(r.released_at is not None for r in runs)


def test_missed_runs_drain_at_the_catch_up_rate_and_on_time_runs_do_not_wait(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    """60 runs missed in an outage (one-off jobs whose time passed 5 minutes ago) leave at the
    drain rate of 5/s; a job due while they drain does not queue behind them."""
    with pipeline.store.tx() as tx:
        flow.set_limits(tx.conn, "@catch-up", rate=5.0, burst=5)
    time.sleep(3)  # the dispatcher re-reads limits every 2 s
    past = (datetime.now(UTC) - timedelta(minutes=5)).replace(microsecond=0)
    missed = [
        e2e_job(f"missed-{i}", f"{http_target.url}/missed/{i}", schedule={"at": past.isoformat()})
        for i in range(60)
    ]
    pipeline.apply(missed)
    http_target.wait_for("/missed/", 5, timeout=30)  # the drain has begun
    on_time = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    pipeline.apply(
        [e2e_job("punctual", f"{http_target.url}/punctual", schedule={"at": on_time.isoformat()})]
    )
    requests = http_target.wait_for("/missed/", 60, timeout=90)
    [punctual] = http_target.wait_for("/punctual", 1, timeout=30)
    assert len(requests) == 60
    # On time runs pass beside the drain: this one started before the drain was done (and,
    # below, was never held by it).
    assert punctual.at < max(r.at for r in requests)
    missed_runs = pipeline.sql(
        "SELECT state, throttled_ms, released_at FROM runs WHERE job_id LIKE 'missed-%'"
    )
    # The drain limits releases (the dispatcher's stamps on the records): a bucket of 5
    # refilled at 5/s lets at most 5 + 5 x t through in any t seconds.
    released = sorted(r.released_at.timestamp() for r in missed_runs)
    for window in (1.0, 3.0):
        most = max(sum(1 for a in released if t <= a < t + window) for t in released)
        assert most <= 5 + 5 * window + 1, (window, most)
    assert released[-1] - released[0] >= (60 - 5) / 5 - 1

    def all_succeeded() -> bool:  # a request reaches the target before its run is recorded
        rows = pipeline.sql(
            "SELECT count(*) AS n FROM runs WHERE job_id LIKE 'missed-%' AND state = 'succeeded'"
        )
        return rows[0].n == 60

    pipeline.wait_until("every missed run recorded", all_succeeded, timeout=60)
    missed_runs = pipeline.sql("SELECT throttled_ms FROM runs WHERE job_id LIKE 'missed-%'")
    assert max(r.throttled_ms or 0 for r in missed_runs) >= 5000  # the wait is on the records
    [row] = pipeline.sql("SELECT throttled_ms FROM runs WHERE job_id = 'punctual'")
    assert row.throttled_ms == 0


def test_a_killed_workers_in_flight_slot_returns_within_the_lease(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
) -> None:
    """One slot for the target; the run holding it loses its worker (SIGKILL) while the target
    holds the request. The slot is not leaked: once the lease runs out, the reaper ends the
    attempt, the slot stops counting, and the waiting run of the same target goes."""
    with pipeline.store.tx() as tx:
        flow.set_limits(tx.conn, "one-slot", max_in_flight=1)
    time.sleep(3)  # the dispatcher re-reads limits every 2 s
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    lease = {"lease_seconds": 6, "heartbeat_seconds": 2}
    pipeline.apply(
        [
            e2e_job(
                "holder",
                f"{http_target.url}/slow-first/holder",
                schedule={"at": due.isoformat()},
                target_service="one-slot",
                **lease,
            ),
            e2e_job(
                "waiter",
                f"{http_target.url}/ok/waiter",
                schedule={"at": (due + timedelta(milliseconds=500)).isoformat()},
                target_service="one-slot",
                **lease,
            ),
        ]
    )
    [held] = http_target.wait_for("/slow-first/holder", 1, timeout=30)
    time.sleep(1)
    assert not http_target.matching("/ok/waiter")  # the one slot is taken
    pipeline.kill("worker")
    killed_at = time.time()
    pipeline.start("worker")
    [waiter] = http_target.wait_for("/ok/waiter", 1, timeout=60)
    # Within the lease (6 s) plus the reaper's and the dispatcher's rounds, not the 60 s the
    # target holds the dead worker's request.
    assert waiter.at - killed_at < 6 + 20
    assert waiter.at > held.at + 3  # it did wait for the slot

    def finished() -> bool:
        rows = pipeline.sql(
            "SELECT count(*) AS n FROM runs WHERE job_id IN ('holder', 'waiter')"
            " AND state = 'succeeded'"
        )
        return rows[0].n == 2

    pipeline.wait_until("both runs succeeded", finished, timeout=60)
    [holder] = pipeline.sql("SELECT attempt FROM runs WHERE job_id = 'holder'")
    assert holder.attempt == 2  # the killed attempt ended by lease expiry, then retried
