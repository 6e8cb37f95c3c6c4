"""What one delivery attempt comes to (delivery_outcome), and the body a receiver gets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from duetime.alerts import AlertKind, AlertState, ClaimedAlert, alert_body, delivery_outcome
from duetime.schedule import RetryPolicy

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(
    max_attempts=4,
    initial_interval=timedelta(seconds=1),
    multiplier=2.0,
    max_interval=timedelta(seconds=5),
    jitter=0.2,
)


def _alert(attempt: int = 1, alert_id: int = 7) -> ClaimedAlert:
    return ClaimedAlert(
        alert_id=alert_id,
        kind=AlertKind.RUN_DEAD,
        subject="0b5c7e8e-0000-5000-8000-000000000001",
        tenant="acme",
        status="firing",
        summary="run is dead",
        details={"attempts": 3, "last_error": "HTTP 500"},
        attempt=attempt,
        created_at=NOW - timedelta(seconds=3),
        tenant_webhook="https://hooks.example/acme",
    )


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    outcome = delivery_outcome(_alert(), NOW, POLICY, status=status)
    assert (outcome.state, outcome.at, outcome.next_attempt_at) == (AlertState.DELIVERED, NOW, None)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
def test_retryable_answers_wait_a_growing_capped_backoff(status: int) -> None:
    delays = []
    for attempt in (1, 2, 3):
        outcome = delivery_outcome(_alert(attempt), NOW, POLICY, status=status)
        assert outcome.state is AlertState.PENDING and outcome.error == f"HTTP {status}"
        assert outcome.next_attempt_at is not None
        delays.append(outcome.next_attempt_at - NOW)
    base = [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4)]
    for delay, cap in zip(delays, base, strict=True):
        assert cap * 0.8 <= delay <= cap
    # The last attempt fails for good.
    last = delivery_outcome(_alert(4), NOW, POLICY, status=status)
    assert (last.state, last.next_attempt_at) == (AlertState.FAILED, None)


def test_the_backoff_never_exceeds_its_cap() -> None:
    policy = RetryPolicy(max_attempts=100, max_interval=timedelta(seconds=5))
    outcome = delivery_outcome(_alert(40), NOW, policy, status=503)
    assert outcome.next_attempt_at is not None
    assert outcome.next_attempt_at - NOW <= timedelta(seconds=5)


@pytest.mark.parametrize("status", [301, 302, 400, 401, 403, 404, 410, 422])
def test_other_answers_fail_at_once(status: int) -> None:
    outcome = delivery_outcome(_alert(1), NOW, POLICY, status=status)
    assert (outcome.state, outcome.error) == (AlertState.FAILED, f"HTTP {status}")


def test_transport_errors_retry_unless_marked_final() -> None:
    retry = delivery_outcome(_alert(1), NOW, POLICY, error="no answer within 5s")
    assert retry.state is AlertState.PENDING and retry.error == "no answer within 5s"
    final = delivery_outcome(_alert(1), NOW, POLICY, error="refused", retryable=False)
    assert final.state is AlertState.FAILED


def test_the_jitter_is_fixed_by_the_alert() -> None:
    a = delivery_outcome(_alert(2, alert_id=1), NOW, POLICY, status=500)
    b = delivery_outcome(_alert(2, alert_id=1), NOW, POLICY, status=500)
    assert a.next_attempt_at == b.next_attempt_at


def test_the_body_is_compact_sorted_json_with_the_alert_identity() -> None:
    body = alert_body(_alert())
    document = json.loads(body)
    assert document == {
        "alert_id": 7,
        "kind": "run.dead",
        "status": "firing",
        "subject": "0b5c7e8e-0000-5000-8000-000000000001",
        "tenant": "acme",
        "created_at": (NOW - timedelta(seconds=3)).isoformat(),
        "summary": "run is dead",
        "details": {"attempts": 3, "last_error": "HTTP 500"},
    }
    assert body == json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    assert b"hooks.example" not in body  # the destination is never part of the alert
