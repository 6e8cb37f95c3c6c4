"""The topic catalog: names (with a configurable prefix), partitions, and the due-time tiers.

Runs travel on time-bucketed topics ``runs.due.<tier>`` chosen by how far ahead of its due time a
run is published, so a dispatcher can treat near and far runs differently (and an operator can see
the future load per tier). Topics are created explicitly at start-up, never by auto-create.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["DUE_TIERS", "REAPER_GROUP", "WORKERS_GROUP", "TopicCatalog", "TopicSpec"]

# (tier name, the longest delay that goes to it). The last tier takes everything further out.
DUE_TIERS: tuple[tuple[str, timedelta], ...] = (
    ("10s", timedelta(seconds=10)),
    ("5m", timedelta(minutes=5)),
    ("1h", timedelta(hours=1)),
)
# The workers' consumer group on runs.ready, after the prefix (decision 16 in docs/decisions.md).
WORKERS_GROUP = "workers"
# The reapers' consumer group on runs.heartbeats and runs.results, after the prefix.
REAPER_GROUP = "reaper"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TopicCatalog:
    """Every duetime topic for one prefix.

    ``partitions`` divides 128, so a job's jobs-topic partition is ``shard_id % partitions``."""

    prefix: str = "duetime."
    partitions: int = 8

    def __post_init__(self) -> None:
        if 128 % self.partitions:
            raise ValueError("partitions must divide 128 (jobs partition = shard_id % partitions)")

    @property
    def jobs(self) -> str:
        return f"{self.prefix}jobs"

    @property
    def jobs_rejected(self) -> str:
        return f"{self.prefix}jobs.rejected"

    def due(self, tier: str) -> str:
        return f"{self.prefix}runs.due.{tier}"

    @property
    def due_topics(self) -> tuple[str, ...]:
        return tuple(self.due(name) for name, _ in DUE_TIERS)

    @property
    def ready(self) -> str:
        return f"{self.prefix}runs.ready"

    @property
    def heartbeats(self) -> str:
        return f"{self.prefix}runs.heartbeats"

    @property
    def results(self) -> str:
        return f"{self.prefix}runs.results"

    @property
    def dead(self) -> str:
        return f"{self.prefix}runs.dead"

    @property
    def workers_group(self) -> str:
        """The consumer group the workers share on ``runs.ready``."""
        return f"{self.prefix}{WORKERS_GROUP}"

    @property
    def reaper_group(self) -> str:
        """The consumer group the reapers share on ``runs.heartbeats`` and ``runs.results``."""
        return f"{self.prefix}{REAPER_GROUP}"

    def tier_for(self, delay: timedelta) -> str:
        """The due topic for a run published ``delay`` before its due time."""
        for name, limit in DUE_TIERS:
            if delay <= limit:
                return self.due(name)
        return self.due(DUE_TIERS[-1][0])

    def all(self) -> tuple[TopicSpec, ...]:
        names = (
            self.jobs,
            self.jobs_rejected,
            *self.due_topics,
            self.ready,
            self.heartbeats,
            self.results,
            self.dead,
        )
        return tuple(TopicSpec(name, self.partitions) for name in names)
