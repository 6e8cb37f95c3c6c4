"""``/v1/stats``: lateness percentiles, the outbox backlog, consumer lag per topic, shard owners
and the due-load forecast with pile-up warnings (``duetime.forecast``).

Lateness, backlog and forecast are scoped by the token's tenant. A tenant's forecast warns of
the minutes where *its own* load exceeds a target's rate; other tenants' load on a shared
target is not shown to it (an admin token sees every tenant's, added up). Consumer lag and shard
owners are about the pipeline, not a tenant's data, and need an admin token.

With several PostgreSQL clusters each figure is read on every cluster and combined
(``cluster_stats``); target limits come from the home cluster.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request

from duetime.bus.lag import ConsumerLagProbe
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import BusError, ConfigError
from duetime.store.fanout import shard_fences

from .auth import Admin, Caller
from .cluster_stats import forecast_all, lateness_all, outbox_all
from .errors import ERROR_RESPONSES
from .models import (
    ForecastOut,
    ForecastSeries,
    LagOut,
    LatenessOut,
    OutboxOut,
    PileUpOut,
    ShardOut,
)
from .routing import clusters_of

__all__ = ["LagProbes", "consumer_groups", "router"]

router = APIRouter(prefix="/v1/stats", tags=["stats"], responses=ERROR_RESPONSES)


@router.get("/lateness")
def lateness(
    request: Request,
    caller: Caller,
    window_seconds: Annotated[float, Query(gt=0, le=7 * 86_400)] = 3600,
) -> LatenessOut:
    """Percentiles of (first start - due) of the runs due in the last ``window_seconds``."""
    row = lateness_all(clusters_of(request), caller.tenant, window_seconds)
    return LatenessOut(
        window_seconds=window_seconds,
        runs=int(row.runs),
        p50_seconds=row.p50_seconds,
        p90_seconds=row.p90_seconds,
        p99_seconds=row.p99_seconds,
        max_seconds=row.max_seconds,
    )


@router.get("/outbox")
def outbox(request: Request, caller: Caller) -> OutboxOut:
    """Runs due by now that the planner has not yet handed to the broker."""
    row = outbox_all(clusters_of(request), caller.tenant)
    age = None if row.oldest_due_at is None else (row.now - row.oldest_due_at).total_seconds()
    return OutboxOut(runs=int(row.runs), oldest_due_at=row.oldest_due_at, oldest_age_seconds=age)


def consumer_groups(catalog: TopicCatalog) -> list[tuple[str, str]]:
    """Each (consumer group, topic) of the pipeline."""
    prefix = catalog.prefix
    return [
        (f"{prefix}planner-ingest", catalog.jobs),
        *((f"{prefix}dispatcher", topic) for topic in catalog.due_topics),
        (catalog.workers_group, catalog.ready),
        (catalog.reaper_group, catalog.heartbeats),
        (catalog.reaper_group, catalog.results),
    ]


class LagProbes:
    """One probe per (group, topic), kept between requests; one request measures at a time."""

    def __init__(self, settings: Settings, timeout: float = 2.0) -> None:
        self._settings = settings
        self._timeout = timeout
        self._lock = threading.Lock()
        self._probes: dict[tuple[str, str], ConsumerLagProbe] = {}

    def measure(self) -> list[LagOut]:
        with self._lock:
            try:
                self._settings.require_kafka()
            except ConfigError as exc:
                return [
                    LagOut(group=g, topic=t, lag=None, partitions={}, error=str(exc))
                    for g, t in consumer_groups(TopicCatalog(self._settings.topic_prefix))
                ]
            answers = []
            for group, topic in consumer_groups(TopicCatalog(self._settings.topic_prefix)):
                probe = self._probes.get((group, topic))
                if probe is None:
                    probe = ConsumerLagProbe(self._settings, group, topic, self._timeout)
                    self._probes[(group, topic)] = probe
                try:
                    lag = probe.measure()
                except BusError as exc:
                    answers.append(
                        LagOut(group=group, topic=topic, lag=None, partitions={}, error=str(exc))
                    )
                    continue
                partitions = {str(p): n for p, n in sorted(lag.partitions.items())}
                answers.append(
                    LagOut(
                        group=group, topic=topic, lag=lag.total, partitions=partitions, error=None
                    )
                )
            return answers

    def close(self) -> None:
        with self._lock:
            for probe in self._probes.values():
                probe.close()
            self._probes.clear()


@router.get("/consumer-lag")
def consumer_lag(request: Request, caller: Admin) -> list[LagOut]:
    """Records each consumer group of the pipeline has yet to read, per topic (admin)."""
    probes: LagProbes = request.app.state.lag_probes
    return probes.measure()


@router.get("/shards")
def shard_owners(request: Request, caller: Admin) -> list[ShardOut]:
    """Each claimed shard's owner and fencing token as the database's fence holds them (admin;
    none in SKIP LOCKED mode, where no planner owns a shard). ``duetime shards`` adds etcd's view.
    """
    fences = shard_fences(clusters_of(request))
    rows = [fences[shard] for shard in sorted(fences)]
    return [
        ShardOut(
            shard=r.shard_id,
            owner=r.owner,
            token=r.token,
            claimed_at=r.claimed_at,
            rejected=r.rejected,
        )
        for r in rows
    ]


@router.get("/forecast")
def due_forecast(
    request: Request,
    caller: Caller,
    hours: Annotated[int, Query(ge=1, le=48)] = 24,
) -> ForecastOut:
    """Runs due per minute for the next ``hours``, per target and tenant, and the minutes whose
    load exceeds a target's rate limit (pile-ups)."""
    result = forecast_all(clusters_of(request), caller.tenant, timedelta(hours=hours))
    points: defaultdict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for load in result.loads:
        offset = int((load.minute - result.start).total_seconds()) // 60
        points[(load.target_service, load.tenant)].append((offset, load.runs))
    return ForecastOut(
        start=result.start,
        end=result.end,
        series=[
            ForecastSeries(
                target_service=target,
                tenant=tenant,
                runs=round(sum(runs for _, runs in series), 3),
                points=series,
            )
            for (target, tenant), series in sorted(points.items())
        ],
        pile_ups=[
            PileUpOut(
                minute=p.minute,
                target_service=p.target_service,
                runs=p.runs,
                rate_per_second=p.rate_per_second,
                limit_per_minute=p.limit_per_minute,
            )
            for p in result.pile_ups
        ],
    )
