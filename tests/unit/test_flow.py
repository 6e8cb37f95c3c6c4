"""Per-target limits: bucket refill and grants."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from duetime.flow import TargetLimit, allowed, refill

T0 = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_a_new_bucket_is_full_and_refills_at_the_rate_up_to_its_size() -> None:
    limit = TargetLimit(rate=50.0, burst=10)
    assert refill(limit, None, None, T0) == 10.0
    assert refill(limit, 0.0, T0, T0 + timedelta(milliseconds=100)) == 5.0
    assert refill(limit, 0.0, T0, T0 + timedelta(seconds=5)) == 10.0
    # A clock that went backwards adds nothing (and takes nothing away).
    assert refill(limit, 3.0, T0, T0 - timedelta(seconds=1)) == 3.0


def test_burst_defaults_to_one_second_of_rate() -> None:
    assert TargetLimit(rate=50.0).bucket_size == 50
    assert TargetLimit(rate=0.2).bucket_size == 1
    assert refill(TargetLimit(rate=2.5), None, None, T0) == 3.0


def test_without_a_rate_the_bucket_is_bottomless() -> None:
    assert refill(TargetLimit(max_in_flight=4), None, None, T0) == math.inf
    assert allowed(TargetLimit(max_in_flight=4), math.inf, live=1, want=10) == 3


def test_a_grant_is_the_smallest_of_demand_tokens_and_free_slots() -> None:
    limit = TargetLimit(rate=100.0, max_in_flight=8)
    assert allowed(limit, tokens=5.9, live=0, want=10) == 5
    assert allowed(limit, tokens=50.0, live=6, want=10) == 2
    assert allowed(limit, tokens=50.0, live=9, want=10) == 0  # over after a limit was lowered
    assert allowed(limit, tokens=50.0, live=0, want=3) == 3
    assert allowed(limit, tokens=0.4, live=0, want=3) == 0


def test_own_limits_override_the_default_one_by_one() -> None:
    default = TargetLimit(rate=10.0, burst=20, max_in_flight=5)
    own = TargetLimit(max_in_flight=50)
    assert own.over(default) == TargetLimit(rate=10.0, burst=20, max_in_flight=50)
    assert TargetLimit().over(TargetLimit()).limited is False
