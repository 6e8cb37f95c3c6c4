"""The worker's own view of its lease, on the monotonic clock. Pure.

The database decides whether a lease is valid (``lease_expires_at`` by the DB clock, and the token
compare-and-set). But a worker cut off from the database never hears that its lease ran out, and
would keep calling the target while the reaper hands the run to someone else. So the worker keeps
a conservative local deadline and stops by itself when it passes (self-fencing).

Conservative means: the lease is counted from the moment the renewal request was *sent* (the
database's ``now()`` in that statement is later, so its expiry is later than ours), and a margin
is subtracted to leave time to cancel the execution before the database expiry arrives. Monotonic
time is used so that wall-clock steps (NTP, a VM resume) cannot stretch the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache

__all__ = ["LeaseClock", "effective_heartbeat_interval", "lease_margin"]

_MIN_MARGIN = timedelta(milliseconds=500)
_MARGIN_FRACTION = 0.1


# Cached: every attempt asks, and a spike's runs share a handful of lease lengths.
@lru_cache(maxsize=256)
def lease_margin(lease: timedelta) -> timedelta:
    """How long before the lease's end the worker gives up: 10% (at least 0.5 s, at most half)."""
    return min(max(lease * _MARGIN_FRACTION, _MIN_MARGIN), lease / 2)


@lru_cache(maxsize=256)
def effective_heartbeat_interval(lease: timedelta, requested: timedelta) -> timedelta:
    """The renewal period to use: ``requested`` unless it cannot keep the lease alive.

    A job's heartbeat interval is validated to be shorter than its lease, but a heartbeat that
    fires just before the local deadline would leave no room for a retry after a failed renewal;
    anything longer than half of the usable lease is shortened to that.
    """
    usable = lease - lease_margin(lease)
    ceiling = usable / 2
    if requested <= timedelta(0) or requested > ceiling:
        return ceiling
    return requested


@dataclass
class LeaseClock:
    """Tracks when the lease was last known good and when the worker must stop.

    Attributes:
        lease: The lease length each claim or renewal grants.
        margin: Subtracted from the lease to get the local deadline.
        renewed_at: Monotonic time (seconds) at which the last successful claim/renewal was sent.
    """

    lease: timedelta
    margin: timedelta
    renewed_at: float
    # lease - margin in seconds: the renewer reads every lease's deadline on each of its rounds.
    _usable: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._usable = (self.lease - self.margin).total_seconds()

    @classmethod
    def start(cls, lease: timedelta, sent_at: float) -> LeaseClock:
        return cls(lease=lease, margin=lease_margin(lease), renewed_at=sent_at)

    @property
    def deadline(self) -> float:
        """Monotonic time after which the worker must consider the lease lost."""
        return self.renewed_at + self._usable

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` succeeded. Out-of-order answers never move it back."""
        self.renewed_at = max(self.renewed_at, sent_at)

    def remaining(self, now: float) -> float:
        return self.deadline - now

    def expired(self, now: float) -> bool:
        return now >= self.deadline
