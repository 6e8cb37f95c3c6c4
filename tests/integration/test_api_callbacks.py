"""An async target's heartbeat and complete calls through the API, on PostgreSQL: authentication
by the attempt's callback token, fencing of stale calls, progress kept and handed to the next
attempt, and the retry rules of a reported failure."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from duetime.model import run_id_for
from duetime.store import AttemptEnd, Claim, ClaimRequest, NewRun

from .api_client import Api, open_api

pytestmark = pytest.mark.integration

SCHEDULED = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RUN = run_id_for("async-job", SCHEDULED)
LEASE = timedelta(seconds=30)


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with open_api(database_url) as api:
        with api.store.tx() as tx:
            tx.runs_ensure_partition(SCHEDULED.date())
            tx.runs_insert([NewRun(RUN, "async-job", "acme", "svc", SCHEDULED, SCHEDULED, 3)])
        yield api


def _hand_over(api: Api, attempt: int) -> Claim:
    """What a worker does for a 202: claim the attempt, then hand it over (state running)."""
    request = ClaimRequest(RUN, SCHEDULED, attempt, uuid.uuid4(), LEASE)
    claim = api.store.runs_claim_batch("w1", [request])[request.lease_token]
    handed = AttemptEnd(
        RUN,
        SCHEDULED,
        attempt,
        claim.lease_token,
        "running",
        "accepted",
        status_code=202,
        lease=LEASE,
    )
    assert api.store.runs_complete_batch("w1", [handed]) == {claim.lease_token}
    return claim


def _call(api: Api, attempt: int, what: str, token: uuid.UUID | str | None, **body: Any) -> Any:
    headers = {} if token is None else {"X-Duetime-Callback-Token": str(token)}
    return api.client.post(f"/v1/runs/{RUN}/attempts/{attempt}/{what}", json=body, headers=headers)


def _run_row(api: Api) -> Any:
    with api.store.engine.begin() as conn:
        return conn.execute(
            text(
                "SELECT state, attempt, progress, lease_expires_at, due_at > now() AS later "
                "FROM runs WHERE run_id = :r"
            ),
            {"r": RUN},
        ).one()


def _fenced(api: Api) -> list[tuple[int, str, str]]:
    with api.store.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT attempt, worker, outcome FROM run_fenced_completions "
                "WHERE run_id = :r ORDER BY received_at"
            ),
            {"r": RUN},
        ).all()
    return [(r.attempt, r.worker, r.outcome) for r in rows]


def test_a_call_needs_the_attempts_own_token(api: Api) -> None:
    claim = _hand_over(api, 1)
    assert _call(api, 1, "heartbeat", None).status_code == 401
    for wrong in (uuid.uuid4(), "not-a-token"):
        answer = _call(api, 1, "heartbeat", wrong)
        assert (answer.status_code, answer.json()["error"]) == (404, "not_found")
    # The token of attempt 1 names attempt 1 only.
    assert _call(api, 2, "complete", claim.lease_token, outcome="succeeded").status_code == 404
    # A fencing token that is not the attempt's is refused as fenced.
    refused = api.client.post(
        f"/v1/runs/{RUN}/attempts/1/heartbeat",
        json={},
        headers={
            "X-Duetime-Callback-Token": str(claim.lease_token),
            "X-Duetime-Fencing-Token": "4",
        },
    )
    assert refused.status_code == 409 and refused.json()["message"].startswith("fenced:")
    assert _run_row(api).state == "running"
    assert api.counted("duetime_api_heartbeats_total", result="fenced") == 1
    assert api.counted("duetime_api_heartbeats_total", result="accepted") == 0
    # Requests are counted by route template, never by the run's own path.
    route = "/v1/runs/{run_id}/attempts/{attempt}/heartbeat"
    for status, times in (("401", 1), ("404", 2), ("409", 1)):
        counted = api.counted(
            "duetime_api_requests_total", route=route, method="POST", status=status
        )
        assert counted == times, status


def test_progress_must_be_printable_ascii(api: Api) -> None:
    claim = _hand_over(api, 1)
    answer = _call(api, 1, "heartbeat", claim.lease_token, progress="caf\u00e9")
    assert (answer.status_code, answer.json()["field"]) == (400, "progress")
    assert _run_row(api).progress is None


def _expire(api: Api, claim: Claim, attempt: int) -> None:
    """What the reaper does to a lease that ran out: the attempt ends, the run is retried."""
    expired = AttemptEnd(
        RUN, SCHEDULED, attempt, claim.lease_token, "scheduled", "lease_expired", error="lease"
    )
    assert api.store.runs_complete_batch("reaper", [expired]) == {claim.lease_token}


def test_heartbeats_keep_progress_for_the_next_attempt_and_a_stale_attempt_is_fenced(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first = _hand_over(api, 1)
    before = _run_row(api).lease_expires_at
    beat = _call(api, 1, "heartbeat", first.lease_token, progress='{"rows":500}')
    assert beat.status_code == 200, beat.text
    assert beat.json()["state"] == "running"
    row = _run_row(api)
    assert row.progress == '{"rows":500}' and row.lease_expires_at > before

    _expire(api, first, 1)  # the target went silent
    second = _hand_over(api, 2)
    assert second.resume == '{"rows":500}'  # the next attempt continues from there

    # Attempt 1 wakes up: its calls are stale, refused as fenced, recorded, nothing changed.
    stale_beat = _call(api, 1, "heartbeat", first.lease_token, progress="stale")
    stale_end = _call(api, 1, "complete", first.lease_token, outcome="succeeded")
    for stale in (stale_beat, stale_end):
        assert stale.status_code == 409
        assert stale.json()["error"] == "conflict"
        assert stale.json()["message"].startswith("fenced:")
    assert _fenced(api) == [(1, "target", "heartbeat"), (1, "target", "succeeded")]
    row = _run_row(api)
    assert (row.state, row.attempt, row.progress) == ("running", 2, '{"rows":500}')

    done = _call(api, 2, "complete", second.lease_token, outcome="succeeded", progress="all")
    assert (done.status_code, done.json()["state"]) == (200, "succeeded")
    assert _run_row(api).progress == "all"
    # Counted on the API's /metrics, under the names the worker counts its own ends by.
    assert api.counted("duetime_api_heartbeats_total", result="accepted") == 1
    assert api.counted("duetime_api_heartbeats_total", result="fenced") == 1
    assert api.counted("duetime_completions_fenced_total") == 1
    assert api.counted("duetime_runs_succeeded_total") == 1
    # The callback tokens never reach a log line.
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "attempt.callback_fenced" in logged
    assert str(first.lease_token) not in logged and str(second.lease_token) not in logged


def test_a_reported_failure_is_retried_and_later_calls_of_that_attempt_change_nothing(
    api: Api,
) -> None:
    claim = _hand_over(api, 1)
    failed = _call(api, 1, "complete", claim.lease_token, outcome="failed", error="disk full")
    assert (failed.status_code, failed.json()["state"]) == (200, "scheduled")
    row = _run_row(api)
    assert (row.state, row.attempt, row.later) == ("scheduled", 1, True)  # after the backoff
    with api.store.engine.begin() as conn:
        attempt_row = conn.execute(
            text("SELECT outcome, error, status_code FROM run_attempts WHERE run_id = :r"),
            {"r": RUN},
        ).one()
    assert tuple(attempt_row) == ("failed", "disk full", 202)
    # Repeated (its answer lost): accepted again. Contradicted, or a heartbeat after it: 409
    # "ended", and not a stale holder's call, so not recorded as fenced.
    again = _call(api, 1, "complete", claim.lease_token, outcome="failed", error="disk full")
    assert (again.status_code, again.json()["state"]) == (200, "scheduled")
    for late in (
        _call(api, 1, "complete", claim.lease_token, outcome="succeeded"),
        _call(api, 1, "heartbeat", claim.lease_token, progress="more"),
    ):
        assert late.status_code == 409 and late.json()["message"].startswith("ended:")
    row = _run_row(api)
    assert (row.state, row.attempt, row.progress) == ("scheduled", 1, None)
    assert _fenced(api) == []
    # One retried run: the repeated completion is not counted again, nor are the refused calls.
    assert api.counted("duetime_runs_retried_total") == 1
    for name in ("duetime_runs_succeeded_total", "duetime_completions_fenced_total"):
        assert api.counted(name) == 0, name


def test_a_final_failure_makes_the_run_dead(api: Api) -> None:
    claim = _hand_over(api, 1)
    answer = _call(
        api,
        1,
        "complete",
        claim.lease_token,
        outcome="failed",
        error="bad input",
        retryable=False,
    )
    assert (answer.status_code, answer.json()["state"]) == (200, "dead")
    assert _run_row(api).state == "dead"
    assert api.counted("duetime_runs_dead_total") == 1
    assert api.counted("duetime_runs_retried_total") == 0
