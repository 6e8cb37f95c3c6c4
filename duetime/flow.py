"""Per-target limits as pure decisions: token-bucket refill and how many runs a grant allows.

The dispatcher asks the database for a grant (``duetime.store`` runs the transaction that locks
the target's row); this module decides the numbers, so the rule is unit-tested without one.

* **Rate**: a token bucket of ``burst`` tokens refilled at ``rate`` per second (by the database
  clock). A run released takes one token. ``burst`` defaults to one second's worth
  (``ceil(rate)``, at least 1).
* **In flight**: at most ``max_in_flight`` attempts released and not yet ended.
* A target with no limits of its own takes those of the default row ``*``; with neither, it is
  not throttled at all (and costs the dispatcher no database work).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

__all__ = ["CATCH_UP", "DEFAULT_TARGET", "TargetLimit", "allowed", "refill"]

#: The name of the row holding the limits of targets that have none of their own.
DEFAULT_TARGET = "*"
#: The drain every missed run passes before its own target's limits: runs planned after their
#: time (an outage, a stopped planner) leave at this row's rate, never all at once.
CATCH_UP = "@catch-up"


@dataclass(frozen=True)
class TargetLimit:
    """A target's limits; None means "no such limit"."""

    rate: float | None = None
    burst: int | None = None
    max_in_flight: int | None = None

    @property
    def limited(self) -> bool:
        return self.rate is not None or self.max_in_flight is not None

    @property
    def bucket_size(self) -> int:
        """The most tokens the bucket holds (``burst``, else one second's worth)."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.rate or 0.0))

    def over(self, default: TargetLimit) -> TargetLimit:
        """These limits, each missing one taken from ``default``."""
        return TargetLimit(
            rate=self.rate if self.rate is not None else default.rate,
            burst=self.burst if self.burst is not None else default.burst,
            max_in_flight=(
                self.max_in_flight if self.max_in_flight is not None else default.max_in_flight
            ),
        )


def refill(
    limit: TargetLimit, tokens: float | None, refilled_at: datetime | None, now: datetime
) -> float:
    """The tokens in the bucket at ``now`` (a new bucket starts full); inf without a rate."""
    if limit.rate is None:
        return math.inf
    size = float(limit.bucket_size)
    if tokens is None or refilled_at is None:
        return size
    elapsed = max(0.0, (now - refilled_at).total_seconds())
    return min(size, tokens + limit.rate * elapsed)


def allowed(limit: TargetLimit, tokens: float, live: int, want: int) -> int:
    """How many of ``want`` runs may be released now, given the bucket and the live slots."""
    count = want
    if limit.rate is not None:
        count = min(count, math.floor(tokens + 1e-9))
    if limit.max_in_flight is not None:
        count = min(count, limit.max_in_flight - live)
    return max(0, count)
