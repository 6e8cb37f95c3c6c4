"""Overlap decisions and retry backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.errors import InvalidInput, ScheduleError
from duetime.schedule import (
    OverlapPolicy,
    RetryPolicy,
    has_attempts_left,
    overlap_decision,
    retry_base_delay,
    retry_delay,
)


@pytest.mark.parametrize(
    ("policy", "running", "buffered", "decision"),
    [
        ("allow", 0, 0, "start"),
        ("allow", 3, 0, "start"),
        ("skip", 0, 0, "start"),
        ("skip", 1, 0, "skip"),
        ("buffer_one", 0, 0, "start"),
        ("buffer_one", 1, 0, "buffer"),
        ("buffer_one", 1, 1, "skip"),
        ("buffer_one", 0, 1, "skip"),
    ],
)
def test_overlap_decisions(
    policy: OverlapPolicy, running: int, buffered: int, decision: str
) -> None:
    assert overlap_decision(policy, running, buffered) == decision


def test_overlap_rejects_nonsense() -> None:
    with pytest.raises(ScheduleError):
        overlap_decision("queue", 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        overlap_decision("allow", -1, 0)


def test_default_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy()
    bases = [retry_base_delay(policy, attempt) for attempt in range(1, 13)]
    assert bases[:3] == [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4)]
    assert bases[8] == timedelta(seconds=256)
    assert bases[9:] == [timedelta(minutes=5)] * 3
    assert bases == sorted(bases)
    assert retry_base_delay(policy, 10_000) == timedelta(minutes=5)


def test_jittered_delays_grow_until_the_cap() -> None:
    policy = RetryPolicy()
    delays = [retry_delay(policy, "run-1", attempt) for attempt in range(1, 10)]
    assert delays == sorted(delays)  # multiplier 2 * (1 - 0.2) >= 1 keeps them ordered


def test_delay_is_deterministic_per_run_and_attempt() -> None:
    policy = RetryPolicy()
    assert retry_delay(policy, "run-1", 3) == retry_delay(policy, "run-1", 3)
    spread = {retry_delay(policy, f"run-{n}", 3) for n in range(50)}
    assert len(spread) > 40  # jitter really spreads retries of different runs


def test_attempts_left() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [has_attempts_left(policy, attempt) for attempt in (1, 2, 3)] == [True, True, False]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"initial_interval": timedelta(0)}, "retry.initial_interval"),
        ({"multiplier": 0.5}, "retry.multiplier"),
        ({"multiplier": float("inf")}, "retry.multiplier"),
        ({"max_interval": timedelta(milliseconds=1)}, "retry.max_interval"),
        ({"jitter": 1.5}, "retry.jitter"),
        ({"jitter": float("nan")}, "retry.jitter"),
    ],
)
def test_retry_policy_validation(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.integers(1, 60),
    st.floats(0.0, 1.0),
    st.floats(1.0, 4.0),
    st.integers(1, 10_000),
    st.integers(0, 100_000),
)
def test_delay_stays_inside_its_jitter_band(
    run_id: str, attempt: int, jitter: float, multiplier: float, initial_ms: int, extra_ms: int
) -> None:
    policy = RetryPolicy(
        initial_interval=timedelta(milliseconds=initial_ms),
        multiplier=multiplier,
        max_interval=timedelta(milliseconds=initial_ms + extra_ms),
        jitter=jitter,
    )
    base = retry_base_delay(policy, attempt)
    delay = retry_delay(policy, run_id, attempt)
    assert delay == retry_delay(policy, run_id, attempt)
    assert base * (1 - jitter) - timedelta(microseconds=1) <= delay <= base
    assert delay <= policy.max_interval
