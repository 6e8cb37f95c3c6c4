"""The cold tier's loader: each coming hour's bucket made hot ahead of time, per owned shard.

Jobs whose next run lies beyond the hot horizon are kept out of the due index (migration 0015,
``duetime.cold_tier``). Every ``cold_load_interval`` the planner's round asks the loader to make
hot every cold bucket of its shards that starts before ``now + hot_horizon``: with the default
hour, the bucket of 14:00-15:00 is loaded at 13:00, long before the lookahead (30 s, at most
10 min for a spike) reaches it.

One transaction per bucket, fenced like a planning transaction in etcd mode: it starts with
``planner_tx_guard`` and ``shards_fence`` (sql/shards.sql), and the load itself carries the held
shards' tokens, so the database refuses a stale owner's load. The loader keeps no state of its
own: a row it skipped (a job write held it) or one written while it ran is found again by the
next round, because the bucket still holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from duetime.cold_tier import load_before
from duetime.logs import event

from .config import PlannerConfig
from .ports import PlannerStore

__all__ = ["ColdLoad", "ColdLoader"]

log = logging.getLogger("duetime.planner")


@dataclass(frozen=True)
class ColdLoad:
    """What one loader round did: buckets it made hot (one transaction each), the jobs they
    held, and buckets whose shards the fence refused (a newer owner)."""

    buckets: int = 0
    jobs: int = 0
    shards_refused: int = 0


class ColdLoader:
    def __init__(self, store: PlannerStore, config: PlannerConfig, member: str) -> None:
        self.store = store
        self.config = config
        self.member = member
        self._last_load: float | None = None

    def maybe_load(
        self, now: float, shards: Sequence[int], tokens: Mapping[int, int] | None
    ) -> ColdLoad:
        """``load`` at most every ``cold_load_interval`` of the monotonic clock ``now``."""
        if (
            self._last_load is not None
            and now - self._last_load < self.config.cold_load_interval.total_seconds()
        ):
            return ColdLoad()
        self._last_load = now
        return self.load(shards, tokens)

    def load(self, shards: Sequence[int], tokens: Mapping[int, int] | None) -> ColdLoad:
        """Make hot every cold bucket of ``shards`` starting before now + the hot horizon.

        ``tokens`` (etcd mode): the shards' fencing tokens; ``None`` (SKIP LOCKED mode) loads
        unfenced, and rows another planner's loader holds are skipped.
        """
        if not shards:
            return ColdLoad()
        cfg = self.config
        with self.store.tx() as tx:
            before = load_before(tx.db_now(), cfg.hot_horizon)
            buckets = tx.jobs_cold_buckets(shards, before, cfg.cold_load_buckets)
        loaded = jobs = refused = 0
        for bucket, _count in buckets:
            with self.store.tx() as tx:
                held_shards: Sequence[int] = shards
                held_tokens = tokens
                if tokens is not None:
                    tx.planner_tx_guard(cfg.fenced_idle_timeout)
                    fence = tx.shards_fence(self.member, tokens)
                    held_tokens = {s: tokens[s] for s in fence.held}
                    held_shards = sorted(fence.held)
                    if fence.refused:
                        refused += 1
                moved = tx.jobs_cold_load(bucket, held_shards, held_tokens) if held_shards else 0
            loaded += 1
            jobs += moved
            event(
                log,
                "cold.loaded",
                bucket=bucket.isoformat(),
                jobs=moved,
                member=self.member,
            )
        return ColdLoad(buckets=loaded, jobs=jobs, shards_refused=refused)
