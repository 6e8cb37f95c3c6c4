"""Async targets end to end: a target answers 202 and reports through the API with the callback
token it was sent (docs/targets.md, "Async targets"), with planner, dispatcher, worker and reaper
running as processes on the real PostgreSQL and broker; the API runs in-process on the same
database."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.fixtures.target import RecordingTarget, Request
from tests.integration.api_client import Api, open_api

from .pipeline import Pipeline, e2e_job, pipeline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

LEASE_SECONDS = 3


def _async_job(job_id: str, target: RecordingTarget) -> dict[str, Any]:
    """One run, due at once, whose target answers 202; a 3 s lease, so that a test outlives it."""
    return e2e_job(
        job_id,
        f"{target.url}/accept/{job_id}",
        schedule={"at": datetime.now(UTC).isoformat()},
        lease_seconds=LEASE_SECONDS,
        heartbeat_seconds=1,
        retry={"max_attempts": 3, "initial_interval_seconds": 0.5, "multiplier": 1},
    )


def _request(target: RecordingTarget, job_id: str, attempt: int) -> Request:
    found = target.wait_for(f"/accept/{job_id}", attempt, timeout=60)
    assert len(found) >= attempt, f"attempt {attempt} never reached the target"
    request = found[attempt - 1]
    assert request.headers["X-Duetime-Attempt"] == str(attempt)
    return request


def _handed_over(pipeline: Pipeline, job_id: str, attempt: int) -> None:  # noqa: F811
    """Wait until the worker recorded the 202 (the hand-over follows the target's answer)."""
    pipeline.wait_until(
        f"attempt {attempt} handed to the target",
        lambda: pipeline.sql(
            "SELECT 1 FROM run_attempts a JOIN runs r USING (run_id) WHERE r.job_id = :j "
            "AND a.attempt = :n AND a.status_code = 202",
            j=job_id,
            n=attempt,
        ),
        timeout=30,
    )


def _post(api: Api, request: Request, what: str, token: str, **body: Any) -> Any:
    run_id = request.headers["X-Duetime-Run-Id"]
    attempt = request.headers["X-Duetime-Attempt"]
    return api.client.post(
        f"/v1/runs/{run_id}/attempts/{attempt}/{what}",
        json=body,
        headers={"X-Duetime-Callback-Token": token},
    )


def _run(pipeline: Pipeline, job_id: str) -> Any:  # noqa: F811
    (row,) = pipeline.sql(
        "SELECT run_id, state, attempt, progress FROM runs WHERE job_id = :j", j=job_id
    )
    return row


def test_a_202_target_heartbeats_past_the_lease_and_completes(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
    database_url: str,
) -> None:
    pipeline.apply([_async_job("async-ok", http_target)])
    request = _request(http_target, "async-ok", 1)
    token = request.headers["X-Duetime-Callback-Token"]
    assert "X-Duetime-Resume" not in request.headers  # nothing to resume on a first attempt
    _handed_over(pipeline, "async-ok", 1)
    with open_api(database_url) as api:
        # Heartbeats for twice the lease: the attempt outlives it, under the same token.
        until = time.monotonic() + 2 * LEASE_SECONDS
        beats = 0
        while time.monotonic() < until:
            beat = _post(api, request, "heartbeat", token, progress=f"step {beats}")
            assert beat.status_code == 200, beat.text
            beats += 1
            time.sleep(1)
        run = _run(pipeline, "async-ok")
        assert (run.state, run.attempt, run.progress) == ("running", 1, f"step {beats - 1}")
        done = _post(api, request, "complete", token, outcome="succeeded")
        assert (done.status_code, done.json()["state"]) == (200, "succeeded"), done.text
    run = _run(pipeline, "async-ok")
    assert (run.state, run.attempt) == ("succeeded", 1)
    attempts = pipeline.sql(
        "SELECT attempt, outcome, status_code, worker FROM run_attempts WHERE run_id = :r",
        r=run.run_id,
    )
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [(1, "succeeded", 202)]
    assert len(http_target.matching("/accept/async-ok")) == 1
    assert (
        pipeline.sql("SELECT 1 FROM run_fenced_completions WHERE run_id = :r", r=run.run_id) == []
    )


def test_a_silent_202_target_loses_its_lease_and_the_next_attempt_resumes_from_its_progress(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,
    database_url: str,
) -> None:
    pipeline.apply([_async_job("async-silent", http_target)])
    first = _request(http_target, "async-silent", 1)
    first_token = first.headers["X-Duetime-Callback-Token"]
    _handed_over(pipeline, "async-silent", 1)
    with open_api(database_url) as api:
        beat = _post(api, first, "heartbeat", first_token, progress='{"step":3}')
        assert beat.status_code == 200, beat.text
        # Then the target goes silent: the reaper expires the lease, and attempt 2 is sent
        # with attempt 1's progress as resume data and a callback token of its own.
        second = _request(http_target, "async-silent", 2)
        assert second.headers["X-Duetime-Resume"] == '{"step":3}'
        second_token = second.headers["X-Duetime-Callback-Token"]
        assert second_token != first_token
        assert int(second.headers["X-Duetime-Fencing-Token"]) > int(
            first.headers["X-Duetime-Fencing-Token"]
        )
        run_id = second.headers["X-Duetime-Run-Id"]
        (expired,) = pipeline.sql(
            "SELECT outcome FROM run_attempts WHERE run_id = :r AND attempt = 1", r=run_id
        )
        assert expired.outcome == "lease_expired"

        # Attempt 1 wakes up late: its heartbeat and its completion are fenced.
        for what, body in (
            ("heartbeat", {"progress": "late"}),
            ("complete", {"outcome": "succeeded"}),
        ):
            stale = _post(api, first, what, first_token, **body)
            assert stale.status_code == 409, stale.text
            assert stale.json()["message"].startswith("fenced:")
        fenced = pipeline.sql(
            "SELECT attempt, worker, outcome FROM run_fenced_completions WHERE run_id = :r "
            "ORDER BY received_at",
            r=run_id,
        )
        assert [(f.attempt, f.worker, f.outcome) for f in fenced] == [
            (1, "target", "heartbeat"),
            (1, "target", "succeeded"),
        ]

        _handed_over(pipeline, "async-silent", 2)
        done = _post(api, second, "complete", second_token, outcome="succeeded")
        assert (done.status_code, done.json()["state"]) == (200, "succeeded"), done.text
    run = _run(pipeline, "async-silent")
    assert (run.state, run.attempt, run.progress) == ("succeeded", 2, '{"step":3}')
