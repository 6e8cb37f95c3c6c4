"""When a condition alert fires and when it resolves: a two-state machine with a hold time. Pure.

A condition (outbox backlog, ``runs.ready`` lag, release lateness) is measured every check and
compared with its threshold. It **fires** once the measurement has been over the threshold for
``hold`` without a break, and **resolves** once it has been back at or under the threshold for
``hold``. A measurement that crosses back before ``hold`` has passed resets the clock. So a spike
shorter than ``hold`` raises nothing, a measurement hovering around its threshold cannot send an
alert per check, and each episode produces exactly one firing and one resolved alert, which share
the episode number (the alerts' dedup subject). ``hold`` zero fires and resolves at the first
check that sees the crossing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["ConditionState", "Transition", "step"]


class Transition(enum.Enum):
    FIRED = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class ConditionState:
    """Where a condition stands between checks (a row of ``alert_conditions``).

    Attributes:
        firing: Whether the last transition was a firing.
        episode: Number of the current (or last) episode; incremented when a condition fires.
        pending_since: When the measurement first disagreed with ``firing`` without a break
            since, or None while it agrees.
    """

    firing: bool = False
    episode: int = 0
    pending_since: datetime | None = None


def step(
    state: ConditionState, over: bool, now: datetime, hold: timedelta
) -> tuple[ConditionState, Transition | None]:
    """The state after a check at ``now`` that found the measurement ``over`` its threshold."""
    if hold < timedelta(0):
        raise ValueError("hold must not be negative")
    if over == state.firing:
        return ConditionState(state.firing, state.episode), None
    since = state.pending_since if state.pending_since is not None else now
    if now - since < hold:
        return ConditionState(state.firing, state.episode, since), None
    if over:
        return ConditionState(True, state.episode + 1), Transition.FIRED
    return ConditionState(False, state.episode), Transition.RESOLVED
