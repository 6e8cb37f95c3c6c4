"""Bounded memory: when to stop reading due records, when to read again, and when to shed.

Every held run costs memory (its record, its ack token), so the number held is capped
(``max_held``). At the cap the intake *pauses* its partitions: the consumer keeps polling and
heartbeating but fetches nothing, and records wait in Kafka, where they cost nothing. Releases
go on, because the release loop never waits for the intake; each release lowers the count, and
below the low-water mark (``resume_below``) the intake resumes. The gap between the two marks
keeps the gate from flapping at every release.

That alone cannot deadlock, but it can starve: if the wheel is full of runs due in two hours, a
run due in ten seconds waiting unread in Kafka would wait two hours too. So a pause has a
limit (``max_pause``). Once the intake has been paused that long, the runs due *last* are shed
until the count is back at the low-water mark: their records are acked without being released,
like a run due too far ahead, and the intake resumes. Nothing is lost, because the database is
the source of truth: the planner's sweeper re-publishes a run that is due and was never claimed.
What shedding costs is time: a shed run is released that sweeper's grace period after its due
instant, instead of on time. Shedding only happens when the dispatcher holds more than it was
sized for for longer than ``max_pause``; the fix then is more dispatchers (more partitions) or a
larger cap, and the ``runs.shed`` warning says so.

Pure: the caller passes the count and the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

__all__ = ["Gate", "IntakeGate"]


class Gate(StrEnum):
    """What the intake should do now."""

    OPEN = "open"
    PAUSED = "paused"


@dataclass
class IntakeGate:
    """Pause at ``max_held``, resume at ``resume_below``, shed after ``max_pause`` paused.

    Attributes:
        max_held: the cap on held runs (what is already fetched may overshoot it slightly: the
            consumer's buffers are not taken back).
        resume_below: the low-water mark; at or below it a paused intake resumes.
        max_pause: the longest the intake stays paused before the runs due last are shed.
    """

    max_held: int
    resume_below: int
    max_pause: timedelta
    state: Gate = Gate.OPEN
    paused_since: datetime | None = None

    def __post_init__(self) -> None:
        if self.max_held < 1:
            raise ValueError("max_held must be at least 1")
        if not 0 <= self.resume_below < self.max_held:
            raise ValueError("resume_below must be below max_held and not negative")
        if self.max_pause <= timedelta(0):
            raise ValueError("max_pause must be positive")

    def update(self, held: int, now: datetime) -> Gate:
        """The gate for ``held`` runs at ``now``; changes state only at the two marks."""
        if self.state is Gate.OPEN and held >= self.max_held:
            self.state, self.paused_since = Gate.PAUSED, now
        elif self.state is Gate.PAUSED and held <= self.resume_below:
            self.state, self.paused_since = Gate.OPEN, None
        return self.state

    def to_shed(self, held: int, now: datetime) -> int:
        """How many of the runs due last to shed now (0 unless paused for ``max_pause``)."""
        if self.state is not Gate.PAUSED or self.paused_since is None:
            return 0
        if now - self.paused_since < self.max_pause:
            return 0
        return max(0, held - self.resume_below)
