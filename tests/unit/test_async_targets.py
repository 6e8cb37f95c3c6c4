"""Async targets (202): the worker's classification, decision, headers and hand-over, and the
pure rules the API applies to a target's progress and completion (duetime.async_targets)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from duetime.async_targets import MAX_PROGRESS, callback_end, progress_problem
from duetime_workers.blocking import BlockingCalls
from duetime_workers.decision import decide
from duetime_workers.headers import http_headers
from duetime_workers.outcome import AttemptOutcome, OutcomeKind, http_outcome
from tests.fakes.run_store import FakeStore

from .test_worker_attempt import OK, FakeEvents, FakeTargets, _run, _runner, calls  # noqa: F401

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ACCEPTED = AttemptOutcome(OutcomeKind.ACCEPTED, status_code=202)


def test_202_hands_the_attempt_to_the_target_and_other_2xx_succeed() -> None:
    assert http_outcome(202, "Accepted", None, NOW) == ACCEPTED
    assert http_outcome(200, "OK", None, NOW).kind is OutcomeKind.SUCCEEDED
    assert http_outcome(204, "No Content", None, NOW).kind is OutcomeKind.SUCCEEDED


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (3, 3)])
def test_an_accepted_attempt_stays_running_whatever_attempt_it_is(
    attempt: int, max_attempts: int
) -> None:
    completion = decide(ACCEPTED, attempt, max_attempts, timedelta(seconds=5))
    assert (completion.state, completion.outcome, completion.status_code) == (
        "running",
        "accepted",
        202,
    )
    assert completion.retry_delay == timedelta(0) and completion.error is None


def test_the_request_carries_the_callback_token_and_the_resume_data() -> None:
    token = uuid.uuid4()
    headers = dict(
        http_headers(
            [("X-Duetime-Callback-Token", "forged"), ("X-Duetime-Resume", "forged")],
            run_id=uuid.uuid4(),
            attempt=2,
            fencing_token=4,
            scheduled_for=NOW,
            user_agent="duetime-worker/test",
            callback_token=token,
            resume='{"rows":500}',
        )
    )
    assert headers["X-Duetime-Callback-Token"] == str(token)  # the job's copy is dropped
    assert headers["X-Duetime-Resume"] == '{"rows":500}'
    bare = dict(
        http_headers(
            [],
            run_id=uuid.uuid4(),
            attempt=1,
            fencing_token=2,
            scheduled_for=NOW,
            user_agent="duetime-worker/test",
        )
    )
    assert "X-Duetime-Resume" not in bare and "X-Duetime-Callback-Token" not in bare


async def test_a_202_hands_the_lease_over_without_ending_the_attempt(
    calls: BlockingCalls,  # noqa: F811
) -> None:
    store, events, targets = FakeStore(), FakeEvents(), FakeTargets(ACCEPTED)
    run = _run(lease_s=2.0)
    report = await _runner(store, events, targets, calls).run(run)
    assert (report.status, report.commit) == ("handed_to_target", True)
    (handed,) = store.completions
    assert (handed.state, handed.outcome, handed.status_code) == ("running", "accepted", 202)
    assert handed.lease == run.lease  # the job's lease from the hand-over on
    held = store.runs[run.run_id]
    assert (held.state, held.token) == ("running", handed.lease_token)
    # No result (the attempt goes on); a heartbeat makes the reaper watch the lease.
    assert events.results == []
    assert [(h.run_id, h.attempt) for h in events.heartbeats] == [(run.run_id, 1)]


async def test_a_hand_over_refused_by_the_database_is_fenced(
    calls: BlockingCalls,  # noqa: F811
) -> None:
    store, events = FakeStore(), FakeEvents()
    run = _run()

    class StolenDuringTheCall(FakeTargets):
        async def execute(self, run_: object, claim: object) -> AttemptOutcome:
            store.steal(run.run_id)
            return ACCEPTED

    report = await _runner(store, events, StolenDuringTheCall(ACCEPTED), calls).run(run)
    assert report.status == "completion_fenced"
    assert len(store.fenced) == 1 and events.heartbeats == []


def test_progress_must_fit_in_a_header() -> None:
    assert progress_problem('{"step": 3, "of": 10}') is None
    assert progress_problem("x" * MAX_PROGRESS) is None
    assert progress_problem("x" * (MAX_PROGRESS + 1)) is not None
    assert progress_problem("line\r\nInjected: 1") is not None
    assert progress_problem("caf\u00e9") is not None


@pytest.mark.parametrize(
    ("succeeded", "retryable", "attempt", "state", "delay"),
    [
        (True, True, 1, "succeeded", timedelta(0)),
        (True, False, 3, "succeeded", timedelta(0)),
        (False, True, 1, "scheduled", timedelta(seconds=4)),
        (False, True, 3, "dead", timedelta(0)),  # the last attempt
        (False, False, 1, "dead", timedelta(0)),  # not worth another attempt
    ],
)
def test_a_target_reported_end_follows_the_retry_rules(
    succeeded: bool, retryable: bool, attempt: int, state: str, delay: timedelta
) -> None:
    end = callback_end(
        succeeded=succeeded,
        retryable=retryable,
        error=None,
        attempt=attempt,
        max_attempts=3,
        backoff=timedelta(seconds=4),
    )
    assert (end.state, end.retry_delay) == (state, delay)
    assert end.outcome == ("succeeded" if succeeded else "failed")
    assert (end.error is None) == succeeded
