"""Planner settings: frozen, validated, with the defaults a production deployment starts from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from duetime.cold_tier import DEFAULT_HOT_HORIZON, validate_hot_horizon
from duetime.errors import ConfigError
from duetime.sharding import SHARD_COUNT

__all__ = ["MAX_HOLD", "PlannerConfig"]

# The dispatcher holds a published run in memory for at most this long before its due time; the
# planner never publishes further ahead.
MAX_HOLD = timedelta(hours=2)


@dataclass(frozen=True)
class PlannerConfig:
    # Runs are materialized and published at least this far ahead of their due time, so at the
    # due instant only in-memory work remains (the dispatcher holds them).
    lookahead: timedelta = timedelta(seconds=30)
    # When a spike is coming the lookahead grows (planning.lookahead_for) so that the whole
    # spike is out `lookahead` before it is due, assuming the planner plans and publishes
    # `planning_rate` jobs per second, or less if it measured less (planning.PlanningRate);
    # never beyond `max_lookahead`. 1000/s is below what one planner does on a loaded 2-core
    # machine (~1500/s measured, docs/planner.md).
    max_lookahead: timedelta = timedelta(minutes=10)
    # A job the due scan finds (next run within the lookahead) is planned `refill` further, so a
    # frequent job's row is read, planned and advanced once per `refill` of its runs instead of
    # once per round (an every-second job: 15 runs per visit, not 1). Runs are then out between
    # lookahead and lookahead + refill ahead of their due time.
    refill: timedelta = timedelta(seconds=15)
    planning_rate: float = 1000.0
    # The jobs due within max_lookahead are counted (a bounded index scan) every second while
    # that is cheap, and at least every probe_interval (Planner.refresh_lookahead).
    probe_interval: timedelta = timedelta(seconds=5)
    probe_bucket: timedelta = timedelta(seconds=5)
    probe_cap: int = 1_000_000
    # How often the loop runs when there is nothing more to do.
    tick_interval: timedelta = timedelta(milliseconds=500)
    # Jobs planned, and runs published, per transaction: one statement each per batch.
    batch_size: int = 5000
    # Runs planned per transaction, about: a batch of frequent jobs (an every-second job has 31
    # runs in a 30 s lookahead) plans its jobs up to the instant where it holds this many runs and
    # goes on from there in the next batch (planning.plan_jobs_capped), so the earliest runs are
    # published first and no transaction grows to hundreds of thousands of rows.
    batch_runs: int = 10_000
    # The sweeper (docs/planner.md): a published run not claimed `sweep_grace` after it was due
    # is re-published only if it is plausibly lost (its group moved past it by more than
    # `sweep_margin`, or claimed nothing for `sweep_grace`). The grace doubles with every
    # publication of the run, up to `sweep_max_grace`; at most `sweep_limit` runs per round.
    sweep_grace: timedelta = timedelta(seconds=30)
    sweep_max_grace: timedelta = timedelta(minutes=10)
    sweep_margin: timedelta = timedelta(seconds=10)
    sweep_limit: int = 1000
    sweep_interval: timedelta = timedelta(seconds=5)
    # An occurrence older than this at planning time counts as missed (catch-up policy applies).
    on_time_grace: timedelta = timedelta(seconds=60)
    shards: tuple[int, ...] = field(default_factory=lambda: tuple(range(SHARD_COUNT)))
    publish_timeout: timedelta = timedelta(seconds=10)
    # Partitions of the runs table are created this many days ahead.
    partitions_ahead_days: int = 3
    # etcd mode: a planning transaction left idle this long (its planner stopped mid-batch) is
    # ended by PostgreSQL, so its locks on the shard fence do not hold up the next owner for
    # long. Well above the longest gap between a batch's statements (the schedule search of
    # 5,000 jobs in Python), which it must not cut: a whole batch, statements and search, took
    # up to 4 s on a loaded 2-core machine (the spike benchmark, docs/failover.md).
    fenced_idle_timeout: timedelta = timedelta(seconds=20)
    # The cold tier (docs/planner.md): jobs due beyond `hot_horizon` are kept out of the due
    # index; every `cold_load_interval` the loader makes each cold bucket that starts before
    # now + hot_horizon hot, one transaction per bucket, at most `cold_load_buckets` per round.
    hot_horizon: timedelta = DEFAULT_HOT_HORIZON
    cold_load_interval: timedelta = timedelta(seconds=5)
    cold_load_buckets: int = 24

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("planner batch_size must be at least 1")
        if self.batch_runs < 1:
            raise ConfigError("planner batch_runs must be at least 1")
        if not self.shards or any(not 0 <= s < SHARD_COUNT for s in self.shards):
            raise ConfigError(f"planner shards must be within 0..{SHARD_COUNT - 1}")
        if self.lookahead < timedelta(0):
            raise ConfigError("planner lookahead must not be negative")
        if not self.lookahead <= self.max_lookahead <= MAX_HOLD:
            raise ConfigError(
                f"planner max_lookahead must be between lookahead and {MAX_HOLD} "
                "(the dispatcher's longest hold)"
            )
        if not timedelta(0) <= self.refill <= MAX_HOLD - self.max_lookahead:
            raise ConfigError(
                f"planner refill must be between 0 and {MAX_HOLD} minus max_lookahead "
                "(the dispatcher's longest hold)"
            )
        if self.planning_rate <= 0:
            raise ConfigError("planner planning_rate must be positive")
        if self.probe_bucket <= timedelta(0) or self.probe_cap < 1:
            raise ConfigError("planner probe_bucket and probe_cap must be positive")
        if self.sweep_grace <= timedelta(0) or self.sweep_max_grace < self.sweep_grace:
            raise ConfigError("planner sweep_max_grace must be at least sweep_grace (> 0)")
        if self.sweep_limit < 1:
            raise ConfigError("planner sweep_limit must be at least 1")
        validate_hot_horizon(self.hot_horizon)
        if self.cold_load_interval <= timedelta(0) or self.cold_load_buckets < 1:
            raise ConfigError("planner cold_load_interval and cold_load_buckets must be positive")
        # The spike probe and the due scan see hot jobs only: a job must be hot before the
        # furthest lookahead reaches it, with a loader round to spare.
        if self.hot_horizon < self.max_lookahead + 2 * self.cold_load_interval:
            raise ConfigError(
                "the hot horizon (DUETIME_HOT_HORIZON) must exceed the planner's max_lookahead "
                "by two cold_load_interval at least"
            )
