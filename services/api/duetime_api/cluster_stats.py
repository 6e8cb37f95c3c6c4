"""The stats of every PostgreSQL cluster combined into the figures one cluster would give.

Counts add up, the oldest is the oldest of all, lateness percentiles come from the clusters'
summed histograms (``duetime.store.fanout.lateness_merged``, one cluster's too), the forecast
adds every cluster's jobs and planned runs under the home cluster's target limits. With one
cluster the other functions run the one cluster's query as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from duetime.forecast import ForecastResult
from duetime.store import api as views
from duetime.store import dashboard as dash
from duetime.store.clusters import ClusterStores
from duetime.store.fanout import Lateness, each_tx, lateness_merged

__all__ = [
    "Outbox",
    "dead_recent_all",
    "forecast_all",
    "lateness_all",
    "outbox_all",
    "queue_depth_all",
]


@dataclass(frozen=True)
class Outbox:
    """``api_stats_outbox``'s row over every cluster."""

    runs: int
    oldest_due_at: datetime | None
    now: datetime


def lateness_all(clusters: ClusterStores, tenant: str | None, window_seconds: float) -> Lateness:
    """Runs and p50/p90/p99/max seconds of lateness over every cluster."""
    with each_tx(clusters.stores) as txs:
        return lateness_merged([tx.conn for tx in txs], tenant, window_seconds)


def outbox_all(clusters: ClusterStores, tenant: str | None) -> Any:
    """``api_stats_outbox``'s row (runs, oldest_due_at, now) over every cluster."""
    if len(clusters) == 1:
        with clusters.home.tx() as tx:
            return views.stats_outbox(tx.conn, tenant)
    with each_tx(clusters.stores) as txs:
        rows = [views.stats_outbox(tx.conn, tenant) for tx in txs]
    oldest = [r.oldest_due_at for r in rows if r.oldest_due_at is not None]
    return Outbox(sum(int(r.runs) for r in rows), min(oldest, default=None), rows[0].now)


def forecast_all(clusters: ClusterStores, tenant: str | None, horizon: timedelta) -> ForecastResult:
    """``stats_forecast`` from the home cluster's now, over every cluster's jobs and runs."""
    with clusters.home.tx() as home:
        now = home.db_now()
        if len(clusters) == 1:
            return views.stats_forecast(home.conn, tenant, now, horizon)
        with each_tx(clusters.stores) as txs:
            shard_conns = [tx.conn for tx in txs]
            return views.stats_forecast(home.conn, tenant, now, horizon, shard_conns=shard_conns)


def queue_depth_all(clusters: ClusterStores, tenant: str | None) -> dash.QueueDepth:
    with each_tx(clusters.stores) as txs:
        depths = [dash.queue_depth(tx.conn, tenant) for tx in txs]
    return dash.QueueDepth(
        sum(d.due_waiting for d in depths),
        sum(d.planned_ahead for d in depths),
        sum(d.running for d in depths),
    )


def dead_recent_all(clusters: ClusterStores, tenant: str | None, window_seconds: float) -> int:
    with each_tx(clusters.stores) as txs:
        return sum(dash.dead_recent(tx.conn, tenant, window_seconds) for tx in txs)
