"""One ``Store`` per PostgreSQL cluster of the shard map, and the routing of batches to them.

A batch (jobs to write, claims, renewals, results) is split by each item's job id into one
sub-batch per cluster (``ShardMap.split``), each sub-batch is one call on that cluster's store;
nothing is per item. With one cluster (no ``DUETIME_SHARD_MAP``) the split is the batch itself.

A batch that spans clusters is one transaction per cluster, not one across them: each cluster's
part commits or fails on its own (docs/clusters.md says what that means for each caller).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TypeVar

from duetime.cold_tier import DEFAULT_HOT_HORIZON
from duetime.shard_map import ShardMap
from duetime.store.store import Store

__all__ = ["ClusterStores"]

T = TypeVar("T")


class ClusterStores:
    """``stores[i]`` serves cluster ``i`` of ``shard_map``; ``home`` the cluster of shard 0."""

    def __init__(
        self,
        shard_map: ShardMap,
        *,
        pool_size: int = 5,
        application_name: str = "duetime",
        hot_horizon: timedelta = DEFAULT_HOT_HORIZON,
    ) -> None:
        self.shard_map = shard_map
        self.stores: tuple[Store, ...] = tuple(
            Store(
                url,
                pool_size=pool_size,
                application_name=application_name,
                hot_horizon=hot_horizon,
            )
            for url in shard_map.urls
        )

    @property
    def home(self) -> Store:
        return self.stores[self.shard_map.cluster_of[0]]

    def __len__(self) -> int:
        return len(self.stores)

    def __iter__(self) -> Iterator[Store]:
        return iter(self.stores)

    def for_shard(self, shard: int) -> Store:
        return self.stores[self.shard_map.cluster_of[shard]]

    def for_job(self, job_id: str) -> Store:
        return self.stores[self.shard_map.cluster_of_job(job_id)]

    def split(self, items: Iterable[T], job_id: Callable[[T], str]) -> list[tuple[Store, list[T]]]:
        """``items`` as (store, the items of its cluster) pairs, clusters in map order."""
        parts = self.shard_map.split(items, job_id)
        return [(self.stores[index], parts[index]) for index in sorted(parts)]

    def close(self) -> None:
        for store in self.stores:
            store.close()
