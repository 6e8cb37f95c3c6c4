"""Retry backoff: exponential with a cap and deterministic jitter per (run_id, attempt).

``delay(n) = base(n) * (1 - jitter * u)`` with ``base(n) = min(max_interval,
initial_interval * multiplier ** (n - 1))`` and ``u`` in [0, 1) from the stable hash of
``"<run_id>:<n>"``. Jitter only shortens the delay, so the cap is a hard cap, and with the
defaults (``multiplier * (1 - jitter) >= 1``) delays never decrease until the cap is reached.
Determinism means a reaper that crashes and re-computes the retry picks the same time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from duetime.errors import InvalidInput
from duetime.schedule._stable_hash import stable_hash64

__all__ = ["RetryPolicy", "has_attempts_left", "retry_base_delay", "retry_delay"]

_TWO_TO_64 = float(2**64)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing run is retried.

    Attributes:
        max_attempts: Attempts in total, the first included; then the run is dead.
        initial_interval: The delay after the first failed attempt (before jitter).
        multiplier: Growth of the delay per failed attempt (at least 1).
        max_interval: The cap on any delay.
        jitter: Fraction (0 to 1) by which a delay may be shortened, to spread retries.
    """

    max_attempts: int = 3
    initial_interval: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_interval: timedelta = timedelta(minutes=5)
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInput("retry.max_attempts", "must be at least 1")
        if self.initial_interval <= timedelta(0):
            raise InvalidInput("retry.initial_interval", "must be positive")
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1.0):
            raise InvalidInput("retry.multiplier", "must be a finite number of at least 1")
        if self.max_interval < self.initial_interval:
            raise InvalidInput("retry.max_interval", "must be at least initial_interval")
        if not (math.isfinite(self.jitter) and 0.0 <= self.jitter <= 1.0):
            raise InvalidInput("retry.jitter", "must be between 0 and 1")


def has_attempts_left(policy: RetryPolicy, attempt: int) -> bool:
    """Return True when a run whose attempt ``attempt`` failed may be tried again."""
    return attempt < policy.max_attempts


def retry_base_delay(policy: RetryPolicy, attempt: int) -> timedelta:
    """Return the delay after failed attempt ``attempt`` (1-based) before jitter."""
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    initial = policy.initial_interval.total_seconds()
    cap = policy.max_interval.total_seconds()
    # Compare exponents in log space so that attempt 10,000 does not overflow a float.
    growth = (attempt - 1) * math.log(policy.multiplier) if policy.multiplier > 1 else 0.0
    if growth >= math.log(cap / initial):
        return policy.max_interval
    return timedelta(seconds=initial * math.exp(growth))


def retry_delay(policy: RetryPolicy, run_id: str, attempt: int) -> timedelta:
    """Return the delay before attempt ``attempt + 1`` after attempt ``attempt`` failed.

    Deterministic in (run_id, attempt); within [base * (1 - jitter), base] and never above
    ``max_interval``.
    """
    base = retry_base_delay(policy, attempt)
    fraction = stable_hash64(f"{run_id}:{attempt}") / _TWO_TO_64
    return base * (1.0 - policy.jitter * fraction)
