"""The dispatcher's intake decisions: routing a due record, and the gate on held runs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from duetime.bus.codec import SCHEMA_HEADER
from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_headers import epoch_ms, routing_headers
from duetime.errors import CodecError
from duetime.model import HttpTarget, KafkaTarget, RunEvent, Target
from duetime_dispatcher.backpressure import Gate, IntakeGate
from duetime_dispatcher.routing import route_record

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def run_event(target: Target, due_at: datetime = T0, attempt: int = 1) -> RunEvent:
    return RunEvent(
        run_id=uuid.uuid4(),
        job_id="job-1",
        tenant="acme",
        scheduled_for=due_at,
        due_at=due_at,
        attempt=attempt,
        max_attempts=3,
        target_service="svc",
        target=target,
        lease=60 * S,
        heartbeat_interval=20 * S,
    )


def test_routes_from_headers_without_decoding_the_value() -> None:
    run_id = uuid.uuid4()
    headers = [
        *routing_headers(run_id, 2, T0 + 5 * S, "http", T0),
        (SCHEMA_HEADER, b"0000000000000000"),
    ]
    routed = route_record(b"not even avro", headers)  # type: ignore[arg-type]
    assert (routed.run_id, routed.attempt, routed.due_at) == (run_id, 2, T0 + 5 * S)
    assert routed.target_kind == "http"
    assert routed.sent_at_ms == epoch_ms(T0)
    assert routed.value == b"not even avro" and routed.headers == headers
    assert routed.run is None


def test_falls_back_to_the_avro_value_without_routing_headers() -> None:
    run = run_event(KafkaTarget(topic="orders", key=None, value="{}"), due_at=T0 + 3 * S, attempt=2)
    value = RUN_EVENTS.encode(run)
    routed = route_record(value, RUN_EVENTS.headers())  # type: ignore[arg-type]
    assert routed.key == (str(run.run_id).encode(), 2)
    assert (routed.due_at, routed.target_kind, routed.run) == (T0 + 3 * S, "kafka", run)
    assert routed.value == value and routed.sent_at_ms is None


def test_malformed_routing_headers_fall_back_too() -> None:
    run = run_event(HttpTarget(url="https://example.com/"))
    headers = [("duetime-run-id", b"not-a-uuid"), ("duetime-attempt", b"1")]
    routed = route_record(RUN_EVENTS.encode(run), headers)
    assert routed.run == run and routed.target_kind == "http"


@pytest.mark.parametrize(
    ("value", "headers"),
    [
        (b"\x02\x99 not avro", []),
        (None, []),
        (None, routing_headers(uuid.uuid4(), 1, T0, "http", T0)),
        (b"x", [("duetime-run-id", str(uuid.uuid4()).encode()), ("duetime-attempt", b"0")]),
    ],
)
def test_poison_raises_a_codec_error(value: bytes | None, headers: list) -> None:  # type: ignore[type-arg]
    with pytest.raises(CodecError):
        route_record(value, headers)


def test_gate_pauses_at_the_cap_and_resumes_at_the_low_water_mark() -> None:
    gate = IntakeGate(max_held=100, resume_below=80, max_pause=60 * S)
    assert gate.update(99, T0) is Gate.OPEN
    assert gate.update(100, T0) is Gate.PAUSED
    # Releases lower the count; between the marks it stays paused (no flapping).
    assert gate.update(90, T0 + S) is Gate.PAUSED
    assert gate.update(81, T0 + 2 * S) is Gate.PAUSED
    assert gate.update(80, T0 + 3 * S) is Gate.OPEN
    assert gate.update(95, T0 + 4 * S) is Gate.OPEN
    assert gate.to_shed(95, T0 + timedelta(hours=1)) == 0  # never while open


def test_gate_sheds_down_to_the_low_water_mark_after_max_pause() -> None:
    """At the cap with nothing due soon, releases cannot make room: after max_pause the runs
    due last go, so a run due sooner than everything held cannot starve behind them."""
    gate = IntakeGate(max_held=100, resume_below=80, max_pause=60 * S)
    gate.update(103, T0)  # what was already fetched may overshoot the cap
    assert gate.to_shed(103, T0 + 59 * S) == 0
    assert gate.to_shed(103, T0 + 60 * S) == 23
    assert gate.update(80, T0 + 60 * S) is Gate.OPEN


@pytest.mark.parametrize(
    ("max_held", "resume_below", "max_pause"),
    [(0, 0, S), (10, 10, S), (10, -1, S), (10, 5, timedelta(0))],
)
def test_gate_refuses_bad_marks(max_held: int, resume_below: int, max_pause: timedelta) -> None:
    with pytest.raises(ValueError):
        IntakeGate(max_held, resume_below, max_pause)
