"""Planner settings: frozen, validated, with the defaults a production deployment starts from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from duetime.errors import ConfigError
from duetime.sharding import SHARD_COUNT

__all__ = ["PlannerConfig"]


@dataclass(frozen=True)
class PlannerConfig:
    # Runs are materialized and published this far ahead of their due time, so at the due instant
    # only in-memory work remains (the dispatcher holds them).
    lookahead: timedelta = timedelta(seconds=30)
    # How often the loop runs when there is nothing more to do.
    tick_interval: timedelta = timedelta(milliseconds=500)
    batch_size: int = 500
    # Runs due but not claimed this long after publication are published again (broker lost its
    # log, dispatcher crashed). The claim compare-and-set makes the duplicate harmless.
    sweep_grace: timedelta = timedelta(seconds=30)
    sweep_interval: timedelta = timedelta(seconds=5)
    # An occurrence older than this at planning time counts as missed (catch-up policy applies).
    on_time_grace: timedelta = timedelta(seconds=60)
    shards: tuple[int, ...] = field(default_factory=lambda: tuple(range(SHARD_COUNT)))
    publish_timeout: timedelta = timedelta(seconds=10)
    # Partitions of the runs table are created this many days ahead.
    partitions_ahead_days: int = 3

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("planner batch_size must be at least 1")
        if not self.shards or any(not 0 <= s < SHARD_COUNT for s in self.shards):
            raise ConfigError(f"planner shards must be within 0..{SHARD_COUNT - 1}")
        if self.lookahead < timedelta(0):
            raise ConfigError("planner lookahead must not be negative")
