"""The alert sender against the in-memory queue and a local receiver: routing, signing, retries.

The queue is the fake (its rules are pinned by tests/integration/test_alert_queue_contract.py);
the receiver is a real HTTP server on 127.0.0.1, so requests, headers and bodies are real.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from duetime.alerts import (
    SIGNATURE_HEADER,
    AlertKind,
    AlertState,
    NewAlert,
    SignatureError,
    tenant_secret,
    verify,
)
from duetime_reaper.alert_config import AlertConfig
from duetime_reaper.alert_sender import AlertSender
from tests.fakes.alert_queue import FakeAlertQueue
from tests.fixtures.target import RecordingTarget

SECRET = "operator-secret"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def _alert(subject: str, tenant: str | None = None) -> NewAlert:
    return NewAlert(AlertKind.RUN_DEAD, subject, "firing", f"run {subject} is dead", tenant)


def _sender(queue: FakeAlertQueue, clock: Clock, **settings: object) -> AlertSender:
    config = replace(AlertConfig(secret=SECRET, timeout=timedelta(seconds=2)), **settings)
    return AlertSender(queue, config, clock=clock)


async def test_an_alert_is_delivered_once_signed_with_the_operator_secret(
    http_target: RecordingTarget,
) -> None:
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(queue, clock, webhook=f"{http_target.url}/ops")
    try:
        stats = await sender.run_once()
        assert (stats.claimed, stats.delivered) == (1, 1)
        assert (await sender.run_once()).claimed == 0
    finally:
        await sender.aclose()
    [delivery] = http_target.matching("")
    assert delivery.path == "/ops"
    assert delivery.headers["X-Duetime-Alert-Id"] == "1"
    assert delivery.headers["X-Duetime-Alert-Kind"] == "run.dead"
    assert delivery.headers["Content-Type"] == "application/json"
    verify(delivery.headers[SIGNATURE_HEADER], delivery.body, SECRET, clock.now)
    with pytest.raises(SignatureError):
        verify(delivery.headers[SIGNATURE_HEADER], delivery.body + b"x", SECRET, clock.now)
    assert json.loads(delivery.body)["subject"] == "r1"
    stored = queue.snapshot(1)
    assert (stored.state, stored.attempts, stored.delivered_at) == (
        AlertState.DELIVERED,
        1,
        clock.now,
    )


async def test_tenant_alerts_go_to_the_tenant_webhook_signed_with_the_tenant_key(
    http_target: RecordingTarget,
) -> None:
    clock = Clock()
    queue = FakeAlertQueue(tenant_webhooks={"acme": f"{http_target.url}/acme"})
    queue.enqueue([_alert("a", "acme"), _alert("g", "globex"), _alert("o")], clock.now)
    sender = _sender(queue, clock, webhook=f"{http_target.url}/ops", allow_private=True)
    try:
        assert (await sender.run_once()).delivered == 3
    finally:
        await sender.aclose()
    [acme] = http_target.matching("/acme")
    assert json.loads(acme.body)["tenant"] == "acme"
    verify(acme.headers[SIGNATURE_HEADER], acme.body, tenant_secret(SECRET, "acme"), clock.now)
    with pytest.raises(SignatureError):
        verify(acme.headers[SIGNATURE_HEADER], acme.body, SECRET, clock.now)
    # A tenant without a webhook, and the operator's own alerts, go to the operator's webhook.
    operator = http_target.matching("/ops")
    assert sorted(json.loads(d.body)["subject"] for d in operator) == ["g", "o"]
    for d in operator:
        verify(d.headers[SIGNATURE_HEADER], d.body, SECRET, clock.now)


async def test_a_tenant_webhook_on_an_internal_address_is_refused(
    http_target: RecordingTarget,
) -> None:
    clock = Clock()
    queue = FakeAlertQueue(tenant_webhooks={"acme": f"{http_target.url}/acme"})
    queue.enqueue([_alert("a", "acme")], clock.now)
    sender = _sender(queue, clock, webhook=f"{http_target.url}/ops")
    try:
        assert (await sender.run_once()).failed == 1
    finally:
        await sender.aclose()
    assert http_target.matching("") == []
    stored = queue.snapshot(1)
    assert stored.state is AlertState.FAILED
    assert stored.last_error is not None and "loopback" in stored.last_error


async def test_without_any_webhook_an_alert_is_unrouted() -> None:
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1", "acme")], clock.now)
    sender = _sender(queue, clock)
    try:
        assert (await sender.run_once()).unrouted == 1
    finally:
        await sender.aclose()
    assert queue.snapshot(1).state is AlertState.UNROUTED


async def test_a_failing_webhook_is_retried_with_backoff_then_failed(
    http_target: RecordingTarget,
) -> None:
    http_target.status = 500
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(
        queue,
        clock,
        webhook=http_target.url,
        max_attempts=4,
        backoff_initial=timedelta(seconds=10),
        backoff_max=timedelta(seconds=25),
    )
    waits = []
    try:
        for attempt in (1, 2, 3):
            assert (await sender.run_once()).retrying == 1
            stored = queue.snapshot(1)
            assert (stored.state, stored.attempts, stored.last_error) == (
                AlertState.PENDING,
                attempt,
                "HTTP 500",
            )
            assert stored.next_attempt_at is not None
            wait = stored.next_attempt_at - clock.now
            waits.append(wait)
            # Not due before its backoff has passed.
            clock.advance(wait - timedelta(milliseconds=1))
            assert (await sender.run_once()).claimed == 0
            clock.advance(timedelta(milliseconds=1))
        assert (await sender.run_once()).failed == 1
        clock.advance(timedelta(hours=1))
        assert (await sender.run_once()).claimed == 0
    finally:
        await sender.aclose()
    assert len(http_target.matching("")) == 4
    assert queue.snapshot(1).state is AlertState.FAILED
    assert waits[0] < waits[1] <= timedelta(seconds=25) and waits[2] <= timedelta(seconds=25)


async def test_redirects_are_not_followed(http_target: RecordingTarget) -> None:
    http_target.status = 302
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(queue, clock, webhook=http_target.url)
    try:
        assert (await sender.run_once()).failed == 1
    finally:
        await sender.aclose()
    assert queue.snapshot(1).last_error == "HTTP 302"


async def test_a_hung_webhook_costs_one_timeout_and_is_retried(
    http_target: RecordingTarget,
) -> None:
    http_target.hang()
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(queue, clock, webhook=http_target.url, timeout=timedelta(seconds=0.3))
    try:
        assert (await sender.run_once()).retrying == 1
    finally:
        await sender.aclose()
        http_target.release()
    stored = queue.snapshot(1)
    assert stored.state is AlertState.PENDING and stored.last_error == "no answer within 0.3s"


async def test_without_a_secret_deliveries_are_unsigned(http_target: RecordingTarget) -> None:
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(queue, clock, webhook=http_target.url, secret=None)
    try:
        assert (await sender.run_once()).delivered == 1
    finally:
        await sender.aclose()
    assert SIGNATURE_HEADER not in http_target.matching("")[0].headers


@pytest.mark.parametrize("url", ["ftp://hooks.example/x", "not a url", "http://"])
async def test_unusable_webhook_urls_fail_without_a_request(url: str) -> None:
    clock, queue = Clock(), FakeAlertQueue()
    queue.enqueue([_alert("r1")], clock.now)
    sender = _sender(queue, clock, webhook=url)
    try:
        assert (await sender.run_once()).failed == 1
    finally:
        await sender.aclose()
    error = queue.snapshot(1).last_error
    assert error is not None and url not in error
