"""Claims made ahead of the due instant, on real PostgreSQL (docs/claim-ahead.md): the lease and
the start count from the due instant, a renewal never shortens such a lease, a job with an overlap
policy is deferred to the due instant, and a claim given back leaves the run as if never claimed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from duetime.store import (
    DEFERRED,
    AttemptEnd,
    Claim,
    ClaimRequest,
    LeaseRenewal,
    Store,
    Unclaim,
)
from tests.fixtures.jobs import apply_http_job

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)
AHEAD = timedelta(seconds=20)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url, pool_size=2)
    with store.tx() as tx:
        today = datetime.now(UTC).date()  # and tomorrow: a run due in 20 s may fall on it
        tx.runs_ensure_partition(today)
        tx.runs_ensure_partition(today + timedelta(days=1))
    yield store
    store.close()


def _run(store: Store, job_id: str, due_in: timedelta) -> tuple[uuid.UUID, datetime, datetime]:
    """A published run due ``due_in`` from the database's now: (run id, scheduled_for, due_at)."""
    run_id = uuid.uuid4()
    with store.engine.begin() as conn:
        row = conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at,"
                " max_attempts, published_at) SELECT :id, :job, 'default', 'example.com',"
                " date_trunc('milliseconds', now()) + :due_in,"
                " date_trunc('milliseconds', now()) + :due_in, 3, now()"
                " RETURNING scheduled_for, due_at"
            ),
            {"id": run_id, "job": job_id, "due_in": due_in},
        ).one()
    return run_id, row.scheduled_for, row.due_at


def _request(
    run: tuple[uuid.UUID, datetime, datetime], job_id: str, *, ahead: bool = True
) -> ClaimRequest:
    return ClaimRequest(run[0], run[1], 1, uuid.uuid4(), LEASE, job_id=job_id, ahead=ahead)


def _rows(store: Store, run_id: uuid.UUID) -> tuple[Any, list[Any]]:
    with store.engine.begin() as conn:
        run = conn.execute(
            text(
                "SELECT state, attempt, lease_token, lease_expires_at, started_at, published_at,"
                " due_at FROM runs WHERE run_id = :id"
            ),
            {"id": run_id},
        ).one()
        attempts = conn.execute(
            text("SELECT attempt, started_at FROM run_attempts WHERE run_id = :id"),
            {"id": run_id},
        ).all()
    return run, list(attempts)


def test_a_claim_ahead_counts_its_lease_and_start_from_the_due_instant(store: Store) -> None:
    apply_http_job(store, "ahead-lease")
    run = _run(store, "ahead-lease", AHEAD)
    request = _request(run, "ahead-lease")
    claim = store.runs_claim_batch("w1", [request])[request.lease_token]
    assert isinstance(claim, Claim)
    assert claim.lease_expires_at == run[2] + LEASE
    assert claim.claimed_at < run[2]
    row, attempts = _rows(store, run[0])
    assert row.state == "running" and row.started_at == run[2]
    assert [(a.attempt, a.started_at) for a in attempts] == [(1, run[2])]
    # A renewal before the due instant keeps the longer lease.
    renewed = store.runs_renew_batch([LeaseRenewal(run[0], run[1], request.lease_token, LEASE)])
    assert renewed == {request.lease_token: run[2] + LEASE}


@pytest.mark.parametrize("due_in", [-timedelta(seconds=5), AHEAD])
def test_a_claim_that_is_not_ahead_counts_from_now(store: Store, due_in: timedelta) -> None:
    """Due already, or due later but not claimed as ahead (a tool, a test): from now."""
    apply_http_job(store, "ahead-due")
    run = _run(store, "ahead-due", due_in)
    request = _request(run, "ahead-due", ahead=False)
    claim = store.runs_claim_batch("w1", [request])[request.lease_token]
    assert isinstance(claim, Claim)
    assert claim.lease_expires_at == claim.claimed_at + LEASE
    row, attempts = _rows(store, run[0])
    assert row.started_at == claim.claimed_at and attempts[0].started_at == claim.claimed_at


def test_a_job_with_an_overlap_policy_is_claimed_at_the_due_instant(store: Store) -> None:
    apply_http_job(store, "ahead-skip", overlap="skip")
    apply_http_job(store, "ahead-allow")
    skip_run = _run(store, "ahead-skip", AHEAD)
    allow_run = _run(store, "ahead-allow", AHEAD)
    deferred, plain = _request(skip_run, "ahead-skip"), _request(allow_run, "ahead-allow")
    claims = store.runs_claim_batch("w1", [deferred, plain])
    assert claims[deferred.lease_token] is DEFERRED
    assert isinstance(claims[plain.lease_token], Claim)
    assert _rows(store, skip_run[0])[0].state == "scheduled"  # untouched
    # At the due instant the same run is claimed, under its policy.
    at_due = _request(skip_run, "ahead-skip", ahead=False)
    assert isinstance(store.runs_claim_batch("w1", [at_due])[at_due.lease_token], Claim)


def test_a_claim_ahead_given_back_leaves_the_run_as_if_never_claimed(store: Store) -> None:
    apply_http_job(store, "ahead-back")
    run = _run(store, "ahead-back", AHEAD)
    request = _request(run, "ahead-back")
    store.runs_claim_batch("w1", [request])
    unclaim = Unclaim(run[0], run[1], 1, request.lease_token)
    assert store.runs_unclaim_batch([unclaim]) == {request.lease_token}
    row, attempts = _rows(store, run[0])
    assert (row.state, row.attempt, row.lease_token, row.lease_expires_at) == (
        "scheduled",
        0,
        None,
        None,
    )
    assert row.started_at is None and attempts == []
    # Unpublished: the outbox offers it again (the planner's publish query picks it up).
    assert row.published_at is None and row.due_at == run[2]
    again = _request(run, "ahead-back")
    claim = store.runs_claim_batch("w2", [again])[again.lease_token]
    assert isinstance(claim, Claim) and claim.attempt == 1
    assert [a.attempt for a in _rows(store, run[0])[1]] == [1]


def test_the_completion_records_when_the_call_of_a_run_claimed_ahead_started(
    store: Store,
) -> None:
    """The claim guessed the due instant; the due gate may have started the call later, and the
    completion says when (the lateness the alerts and /v1/stats/lateness read)."""
    apply_http_job(store, "ahead-start")
    run = _run(store, "ahead-start", AHEAD)
    request = _request(run, "ahead-start")
    store.runs_claim_batch("w1", [request])
    started = run[2] + timedelta(milliseconds=1500)
    end = AttemptEnd(
        run[0],
        run[1],
        1,
        request.lease_token,
        "succeeded",
        "succeeded",
        status_code=200,
        started_at=started,
    )
    assert store.runs_complete_batch("w1", [end]) == {request.lease_token}
    row, attempts = _rows(store, run[0])
    assert row.started_at == started
    assert [(a.attempt, a.started_at) for a in attempts] == [(1, started)]
