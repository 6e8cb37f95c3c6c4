"""One contract for the worker's RunStore port, run against the in-memory fake and PostgreSQL.

The worker's unit tests trust the fake; this suite is what makes that trust earned: every rule the
worker relies on (claim compare-and-set, fenced heartbeat, fenced completion, retry re-claim) must
hold for both implementations.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from duetime.model import run_id_for
from duetime.store import NewRun, Store
from duetime_workers.ports import RunStore
from tests.fakes.run_store import FakeStore

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)
SCHEDULED = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RUN_ID = run_id_for("contract", SCHEDULED)


@pytest.fixture(params=["fake", "postgres"])
def run_store(request: pytest.FixtureRequest) -> Iterator[RunStore]:
    if request.param == "fake":
        yield FakeStore()
        return
    database_url: str = request.getfixturevalue("database_url")
    store = Store(database_url, pool_size=1)
    with store.tx() as tx:
        tx.runs_ensure_partition(SCHEDULED.date())
        tx.runs_insert([NewRun(RUN_ID, "contract", "t", "svc", SCHEDULED, SCHEDULED, 3)])
    yield store
    store.close()


def _claim(store: RunStore, attempt: int, worker: str = "w1"):  # type: ignore[no-untyped-def]
    return store.runs_claim(RUN_ID, SCHEDULED, attempt, worker, LEASE)


def _complete(store: RunStore, attempt: int, token: uuid.UUID, state: str) -> bool:
    return store.runs_complete(
        run_id=RUN_ID,
        scheduled_for=SCHEDULED,
        attempt=attempt,
        worker="w1",
        lease_token=token,
        state=state,
        outcome="succeeded" if state == "succeeded" else "failed",
        error=None if state == "succeeded" else "HTTP 500",
        status_code=200 if state == "succeeded" else 500,
        retry_delay=timedelta(milliseconds=10),
    )


def test_claim_is_a_compare_and_set_on_the_attempt(run_store: RunStore) -> None:
    assert _claim(run_store, 2) is None  # not the next attempt
    claim = _claim(run_store, 1)
    assert claim is not None and claim.attempt == 1
    assert claim.lease_expires_at > claim.claimed_at
    assert _claim(run_store, 1, worker="w2") is None  # a duplicate message claims nothing


def test_heartbeat_and_completion_are_fenced_by_the_token(run_store: RunStore) -> None:
    claim = _claim(run_store, 1)
    assert claim is not None
    stranger = uuid.uuid4()
    assert run_store.runs_heartbeat(RUN_ID, SCHEDULED, stranger, LEASE) is None
    assert run_store.runs_heartbeat(RUN_ID, SCHEDULED, claim.lease_token, LEASE) is not None
    assert not _complete(run_store, 1, stranger, "succeeded")
    assert _complete(run_store, 1, claim.lease_token, "succeeded")
    # Once completed, the old token renews nothing and completes nothing again.
    assert run_store.runs_heartbeat(RUN_ID, SCHEDULED, claim.lease_token, LEASE) is None
    assert not _complete(run_store, 1, claim.lease_token, "succeeded")
    assert _claim(run_store, 2) is None  # a succeeded run is never claimed again


def test_a_retry_is_claimed_by_the_next_attempt_with_a_new_token(run_store: RunStore) -> None:
    first = _claim(run_store, 1)
    assert first is not None
    assert _complete(run_store, 1, first.lease_token, "scheduled")  # retry after backoff
    assert _claim(run_store, 1) is None
    second = _claim(run_store, 2)
    assert second is not None and second.attempt == 2
    assert second.lease_token != first.lease_token
    assert not _complete(run_store, 2, first.lease_token, "succeeded")  # the old attempt is fenced
    assert _complete(run_store, 2, second.lease_token, "dead")
