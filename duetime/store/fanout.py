"""Reads over every cluster of a shard map, merged into the answer one cluster would give.

A list is read from each cluster with the same order and limit, then merged: the first ``limit``
rows of the merge are the first ``limit`` of the whole, since no cluster can hold a row that
comes before its own first ``limit``. Orders on text (job ids) are put in the database's own
collation (``text_order``), not Python's, so a keyset cursor taken from a merged page selects
exactly the rows after it on every cluster. Every cluster must use the same collation
(docs/clusters.md).

With one cluster nothing is merged and no statement is added: each function hands back the one
cluster's answer as it is.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from .clusters import ClusterStores
from .queries import query
from .store import ShardOwnerRow, Store, Tx

__all__ = [
    "LATENESS_SAMPLE",
    "Lateness",
    "each_tx",
    "lateness_merged",
    "merge_by_job_id",
    "merge_newest_runs",
    "merge_runs_list",
    "shard_fences",
    "text_order",
]


@contextmanager
def each_tx(stores: Sequence[Store]) -> Iterator[list[Tx]]:
    """A transaction on each store, in order; all end when the block does."""
    with ExitStack() as stack:
        yield [stack.enter_context(store.tx()) for store in stores]


def text_order(conn: Connection, values: Iterable[str]) -> dict[str, int]:
    """Each distinct value's rank in the database's order of text (one statement)."""
    distinct = list(set(values))
    if len(distinct) < 2:
        return {value: 0 for value in distinct}
    ordered = conn.execute(query("fanout_text_order"), {"values": distinct}).scalars()
    return {value: rank for rank, value in enumerate(ordered)}


def merge_by_job_id(conn: Connection, parts: Sequence[Sequence[Any]], limit: int) -> list[Any]:
    """The first ``limit`` rows of ``parts`` (each ordered by job_id) in job_id order."""
    if len(parts) == 1:
        return list(parts[0][:limit])
    rows = [row for part in parts for row in part]
    rank = text_order(conn, (row.job_id for row in rows))
    rows.sort(key=lambda row: rank[row.job_id])
    return rows[:limit]


def merge_newest_runs(parts: Sequence[Sequence[Any]], limit: int) -> list[Any]:
    """The first ``limit`` runs of ``parts`` (each newest first: scheduled_for, run_id
    descending; a uuid orders in Python as in PostgreSQL, by its bytes)."""
    if len(parts) == 1:
        return list(parts[0][:limit])
    merged = heapq.merge(*parts, key=lambda r: (r.scheduled_for, r.run_id), reverse=True)
    return list(itertools.islice(merged, limit))


def merge_runs_list(conn: Connection, parts: Sequence[Sequence[Any]], limit: int) -> list[Any]:
    """The first ``limit`` rows of ``parts`` in ``runs_list``'s order: scheduled_for
    descending, then job_id in the database's order."""
    if len(parts) == 1:
        return list(parts[0][:limit])
    rows = [row for part in parts for row in part]
    rank = text_order(conn, (row.job_id for row in rows))
    rows.sort(key=lambda row: rank[row.job_id])
    rows.sort(key=lambda row: row.scheduled_for, reverse=True)  # stable: job_id order kept
    return rows[:limit]


@dataclass(frozen=True)
class Lateness:
    """Runs, percentiles and max of (first start - due), seconds (``/v1/stats/lateness``)."""

    runs: int
    p50_seconds: float | None
    p90_seconds: float | None
    p99_seconds: float | None
    max_seconds: float | None


#: The runs /v1/stats/lateness reads per cluster: the latest due in the window.
LATENESS_SAMPLE = 100_000


def lateness_merged(conns: Sequence[Connection], tenant: str | None, window: float) -> Lateness:
    """Lateness over the clusters of ``conns``, from the sum of their millisecond histograms
    (``fanout_lateness_ms``: at most ``LATENESS_SAMPLE`` runs per cluster, the latest due); the
    percentiles interpolate like ``percentile_cont``."""
    counts: Counter[int] = Counter()
    params = {"tenant": tenant, "window_seconds": window, "sample": LATENESS_SAMPLE}
    for conn in conns:
        for row in conn.execute(query("fanout_lateness_ms"), params):
            counts[int(row.late_ms)] += int(row.runs)
    values = sorted(counts)
    total = sum(counts.values())
    if not total:
        return Lateness(0, None, None, None, None)

    def at(index: int) -> float:
        """The ``index``-th smallest sample, in seconds."""
        seen = 0
        for value in values:
            seen += counts[value]
            if index < seen:
                return value / 1000
        raise IndexError(index)

    def percentile(fraction: float) -> float:
        position = fraction * (total - 1)
        low, high = at(math.floor(position)), at(math.ceil(position))
        return low + (high - low) * (position - math.floor(position))

    return Lateness(total, percentile(0.5), percentile(0.9), percentile(0.99), values[-1] / 1000)


def shard_fences(clusters: ClusterStores) -> dict[int, ShardOwnerRow]:
    """Each claimed shard's fence row, read from the shard's own cluster (a row another
    cluster may keep for a shard it no longer holds is not the shard's fence)."""
    fences: dict[int, ShardOwnerRow] = {}
    shard_map = clusters.shard_map
    for index, store in enumerate(clusters.stores):
        with store.tx() as tx:
            rows = tx.shard_owners_list()
        fences.update((r.shard_id, r) for r in rows if shard_map.cluster_of[r.shard_id] == index)
    return fences
