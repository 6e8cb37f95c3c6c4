"""One contract for the worker's RunStore port, run against the in-memory fake and PostgreSQL.

The worker's unit tests trust the fake; this suite is what makes that trust earned: every rule the
worker relies on (claim compare-and-set per row of a batch, claims and completions recognised when
retried with the same token, fenced renewals, fenced completions recorded, retry re-claim) must
hold for both implementations.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from duetime.model import run_id_for
from duetime.store import AttemptEnd, ClaimRequest, LeaseRenewal, NewRun, Store, Unclaim
from duetime_workers.ports import RunStore
from tests.fakes.run_store import FakeStore

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)
SCHEDULED = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RUN_A, RUN_B, RUN_C = (run_id_for(f"contract-{n}", SCHEDULED) for n in "abc")


@pytest.fixture(params=["fake", "postgres"])
def run_store(request: pytest.FixtureRequest) -> Iterator[RunStore]:
    if request.param == "fake":
        yield FakeStore()
        return
    database_url: str = request.getfixturevalue("database_url")
    store = Store(database_url, pool_size=1)
    with store.tx() as tx:
        tx.runs_ensure_partition(SCHEDULED.date())
        tx.runs_insert(
            [
                NewRun(run_id, f"contract-{n}", "t", "svc", SCHEDULED, SCHEDULED, 3)
                for run_id, n in ((RUN_A, "a"), (RUN_B, "b"), (RUN_C, "c"))
            ]
        )
    yield store
    store.close()


def _req(run_id: uuid.UUID, attempt: int, token: uuid.UUID | None = None) -> ClaimRequest:
    return ClaimRequest(run_id, SCHEDULED, attempt, token or uuid.uuid4(), LEASE)


def _end(run_id: uuid.UUID, attempt: int, token: uuid.UUID, state: str) -> AttemptEnd:
    return AttemptEnd(
        run_id,
        SCHEDULED,
        attempt,
        token,
        state,
        "succeeded" if state == "succeeded" else "failed",
        error=None if state == "succeeded" else "HTTP 500",
        status_code=200 if state == "succeeded" else 500,
        retry_delay=timedelta(milliseconds=10),
    )


def _steal(store: RunStore, run_id: uuid.UUID) -> None:
    """What the reaper does to an expired lease: the run changes hands under a new token."""
    if isinstance(store, FakeStore):
        store.steal(run_id)
        return
    assert isinstance(store, Store)
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET lease_token = gen_random_uuid() WHERE run_id = :r"),
            {"r": run_id},
        )


def _fenced_count(store: RunStore) -> int:
    if isinstance(store, FakeStore):
        return len(store.fenced)
    assert isinstance(store, Store)
    with store.engine.begin() as conn:
        return int(conn.execute(text("SELECT count(*) FROM run_fenced_completions")).scalar_one())


def test_a_claim_batch_decides_each_row_on_its_own(run_store: RunStore) -> None:
    held = _req(RUN_C, 1)
    assert held.lease_token in run_store.runs_claim_batch("w0", [held])
    first, copy, wrong_attempt, taken = (
        _req(RUN_A, 1),
        _req(RUN_A, 1),
        _req(RUN_B, 2),
        _req(RUN_C, 1),
    )
    claims = run_store.runs_claim_batch("w1", [first, copy, wrong_attempt, taken])
    # Exactly one of the two copies of RUN_A wins; the wrong attempt and the taken run lose.
    assert len(claims) == 1
    (token, claim), *_ = claims.items()
    assert token in (first.lease_token, copy.lease_token)
    assert claim.attempt == 1 and claim.lease_token == token
    assert claim.lease_expires_at > claim.claimed_at


def test_a_claim_retried_after_its_reply_was_lost_is_recognised(run_store: RunStore) -> None:
    request = _req(RUN_A, 1)
    first = run_store.runs_claim_batch("w1", [request])
    again = run_store.runs_claim_batch("w1", [request])  # same token: our own claim
    assert first[request.lease_token].attempt == again[request.lease_token].attempt == 1
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 1)]) == {}  # anyone else: nothing


def test_renewals_are_fenced_by_the_token(run_store: RunStore) -> None:
    a, b = _req(RUN_A, 1), _req(RUN_B, 1)
    run_store.runs_claim_batch("w1", [a, b])
    _steal(run_store, RUN_B)
    renewed = run_store.runs_renew_batch(
        [
            LeaseRenewal(RUN_A, SCHEDULED, a.lease_token, LEASE),
            LeaseRenewal(RUN_B, SCHEDULED, b.lease_token, LEASE),
            LeaseRenewal(RUN_C, SCHEDULED, uuid.uuid4(), LEASE),
        ]
    )
    assert set(renewed) == {a.lease_token}


def test_a_completion_batch_rejects_only_the_row_whose_lease_was_lost(run_store: RunStore) -> None:
    a, b, c = _req(RUN_A, 1), _req(RUN_B, 1), _req(RUN_C, 1)
    run_store.runs_claim_batch("w1", [a, b, c])
    _steal(run_store, RUN_B)
    before = _fenced_count(run_store)
    accepted = run_store.runs_complete_batch(
        "w1",
        [
            _end(RUN_A, 1, a.lease_token, "succeeded"),
            _end(RUN_B, 1, b.lease_token, "succeeded"),
            _end(RUN_C, 1, c.lease_token, "dead"),
        ],
    )
    assert accepted == {a.lease_token, c.lease_token}
    assert _fenced_count(run_store) == before + 1  # recorded: the evidence for invariant I3
    # Retried with the same tokens (a reply lost): the accepted ones are recognised, nothing
    # changes, and the fenced one stays fenced.
    again = run_store.runs_complete_batch(
        "w1",
        [_end(RUN_A, 1, a.lease_token, "succeeded"), _end(RUN_B, 1, b.lease_token, "succeeded")],
    )
    assert again == {a.lease_token}
    # A completed run renews nothing and is never claimed again.
    assert run_store.runs_renew_batch([LeaseRenewal(RUN_A, SCHEDULED, a.lease_token, LEASE)]) == {}
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 2)]) == {}


def test_a_retry_is_claimed_by_the_next_attempt_with_a_new_token(run_store: RunStore) -> None:
    first = _req(RUN_A, 1)
    run_store.runs_claim_batch("w1", [first])
    assert run_store.runs_complete_batch(
        "w1", [_end(RUN_A, 1, first.lease_token, "scheduled")]
    ) == {first.lease_token}
    assert run_store.runs_claim_batch("w1", [_req(RUN_A, 1)]) == {}
    second = _req(RUN_A, 2)
    assert run_store.runs_claim_batch("w2", [second])[second.lease_token].attempt == 2
    # The old attempt's completion is fenced, even though its own run_attempts row exists.
    stale = _end(RUN_A, 2, first.lease_token, "succeeded")
    assert run_store.runs_complete_batch("w1", [stale]) == set()
    assert run_store.runs_complete_batch("w2", [_end(RUN_A, 2, second.lease_token, "dead")]) == {
        second.lease_token
    }


def test_every_claim_of_a_run_carries_a_higher_fencing_token(run_store: RunStore) -> None:
    """The token a target receives comes from the claim: a claim retried after a lost reply
    keeps its token, and each later attempt's claim carries a higher one."""
    first = _req(RUN_A, 1)
    token_1 = run_store.runs_claim_batch("w1", [first])[first.lease_token].fencing_token
    assert run_store.runs_claim_batch("w1", [first])[first.lease_token].fencing_token == token_1
    run_store.runs_complete_batch("w1", [_end(RUN_A, 1, first.lease_token, "scheduled")])
    second = _req(RUN_A, 2)
    token_2 = run_store.runs_claim_batch("w2", [second])[second.lease_token].fencing_token
    run_store.runs_complete_batch("w2", [_end(RUN_A, 2, second.lease_token, "scheduled")])
    # Stale copies of earlier attempts' messages claim nothing, so they never get a token.
    assert run_store.runs_claim_batch("w3", [_req(RUN_A, 1), _req(RUN_A, 2)]) == {}
    third = _req(RUN_A, 3)
    token_3 = run_store.runs_claim_batch("w3", [third])[third.lease_token].fencing_token
    assert token_1 < token_2 < token_3


def test_a_handed_back_attempt_makes_the_run_claimable_by_the_next_attempt(
    run_store: RunStore,
) -> None:
    """A stopping worker's hand-back: the run is scheduled again under no lease, a retry of the
    statement after a lost reply is recognised, and the next claim is the next attempt."""
    first = _req(RUN_A, 1)
    run_store.runs_claim_batch("w1", [first])
    handed = AttemptEnd(
        RUN_A, SCHEDULED, 1, first.lease_token, "scheduled", "handed_back", error="stopped"
    )
    assert run_store.runs_complete_batch("w1", [handed]) == {first.lease_token}
    assert run_store.runs_complete_batch("w1", [handed]) == {first.lease_token}
    assert _fenced_count(run_store) == 0
    assert (
        run_store.runs_renew_batch([LeaseRenewal(RUN_A, SCHEDULED, first.lease_token, LEASE)]) == {}
    )
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 1)]) == {}
    second = _req(RUN_A, 2)
    assert run_store.runs_claim_batch("w2", [second])[second.lease_token].attempt == 2


def _report_progress(store: RunStore, run_id: uuid.UUID, progress: str) -> None:
    """What an async target's heartbeat leaves on the run (the API writes it, not the worker)."""
    if isinstance(store, FakeStore):
        store.run(run_id).progress = progress
        return
    assert isinstance(store, Store)
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET progress = :p WHERE run_id = :r"), {"p": progress, "r": run_id}
        )


def test_a_hand_over_to_an_async_target_keeps_the_attempt_running_under_its_token(
    run_store: RunStore,
) -> None:
    """202: the end statement keeps the run running under the same token (renewable, not
    claimable), a retry of it is accepted again, and the attempt's own end is accepted later."""
    first = _req(RUN_A, 1)
    run_store.runs_claim_batch("w1", [first])
    accepted = AttemptEnd(
        RUN_A, SCHEDULED, 1, first.lease_token, "running", "accepted", status_code=202, lease=LEASE
    )
    assert run_store.runs_complete_batch("w1", [accepted]) == {first.lease_token}
    assert run_store.runs_complete_batch("w1", [accepted]) == {first.lease_token}
    assert _fenced_count(run_store) == 0
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 1)]) == {}
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 2)]) == {}
    renewal = LeaseRenewal(RUN_A, SCHEDULED, first.lease_token, LEASE)
    assert set(run_store.runs_renew_batch([renewal])) == {first.lease_token}
    done = _end(RUN_A, 1, first.lease_token, "succeeded")
    assert run_store.runs_complete_batch("target", [done]) == {first.lease_token}
    assert run_store.runs_renew_batch([renewal]) == {}


def test_the_next_claim_carries_the_progress_an_earlier_attempt_reported(
    run_store: RunStore,
) -> None:
    first = _req(RUN_A, 1)
    assert run_store.runs_claim_batch("w1", [first])[first.lease_token].resume is None
    _report_progress(run_store, RUN_A, '{"rows": 500}')
    run_store.runs_complete_batch("w1", [_end(RUN_A, 1, first.lease_token, "scheduled")])
    second = _req(RUN_A, 2)
    assert run_store.runs_claim_batch("w2", [second])[second.lease_token].resume == '{"rows": 500}'
    # A claim retried after a lost reply gets it too.
    assert run_store.runs_claim_batch("w2", [second])[second.lease_token].resume == '{"rows": 500}'


def test_a_hand_over_that_lands_after_the_target_completed_is_not_fenced(
    run_store: RunStore,
) -> None:
    """A fast async target answers 202 and completes through the API before the worker's
    hand-over statement reaches the database: the hand-over is accepted, changing nothing."""
    first = _req(RUN_A, 1)
    run_store.runs_claim_batch("w1", [first])
    done = _end(RUN_A, 1, first.lease_token, "succeeded")
    assert run_store.runs_complete_batch("target", [done]) == {first.lease_token}
    accepted = AttemptEnd(
        RUN_A, SCHEDULED, 1, first.lease_token, "running", "accepted", status_code=202, lease=LEASE
    )
    assert run_store.runs_complete_batch("w1", [accepted]) == {first.lease_token}
    assert _fenced_count(run_store) == 0
    renewal = LeaseRenewal(RUN_A, SCHEDULED, first.lease_token, LEASE)
    assert run_store.runs_renew_batch([renewal]) == {}  # still ended: nothing to renew
    assert run_store.runs_claim_batch("w2", [_req(RUN_A, 2)]) == {}


def test_an_attempt_claimed_ahead_is_given_back_as_if_never_claimed(run_store: RunStore) -> None:
    """A worker stopping before the due instant of runs it claimed ahead gives them back: the
    attempt is not burnt, and the next claim of the same attempt number succeeds."""
    first, other = _req(RUN_A, 1), _req(RUN_B, 1)
    run_store.runs_claim_batch("w1", [first, other])
    _steal(run_store, RUN_B)  # RUN_B's lease was lost meanwhile: not ours to give back
    unclaims = [
        Unclaim(RUN_A, SCHEDULED, 1, first.lease_token),
        Unclaim(RUN_B, SCHEDULED, 1, other.lease_token),
    ]
    assert run_store.runs_unclaim_batch(unclaims) == {first.lease_token}
    assert run_store.runs_unclaim_batch(unclaims) == set()  # a retry after a lost reply
    renewal = LeaseRenewal(RUN_A, SCHEDULED, first.lease_token, LEASE)
    assert run_store.runs_renew_batch([renewal]) == {}  # the old token holds nothing
    again = _req(RUN_A, 1)
    assert run_store.runs_claim_batch("w2", [again])[again.lease_token].attempt == 1
    done = _end(RUN_A, 1, again.lease_token, "succeeded")
    assert run_store.runs_complete_batch("w2", [done]) == {again.lease_token}
    assert _fenced_count(run_store) == 0
