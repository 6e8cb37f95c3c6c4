"""The planner's Prometheus metrics (docs/metrics.md), counted once per round from its stats.

The figures of a planning round are per PostgreSQL cluster (label ``cluster``, the index of the
cluster in the shard map; ``"0"`` with one cluster); the jobs-topic ingest's are not.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from .ingest import IngestStats
from .planner import PlanStats

__all__ = ["PlannerMetrics"]

# PlanStats field -> (metric, help).
_ROUND_COUNTERS = {
    "jobs_planned": ("duetime_jobs_planned", "Due jobs the planner planned"),
    "runs_created": ("duetime_runs_planned", "Run records created (one per occurrence)"),
    "runs_published": (
        "duetime_runs_published",
        "Runs the outbox published to a due topic and the broker acknowledged",
    ),
    "publish_failures": (
        "duetime_runs_publish_failures",
        "Run records the broker did not acknowledge (published again later)",
    ),
    "runs_swept": (
        "duetime_runs_swept",
        "Published runs the sweeper found unclaimed and made publishable again",
    ),
    "shards_refused": (
        "duetime_planner_shards_refused",
        "Shards a planning transaction offered under a token a newer owner replaced, refused by"
        " the fence in PostgreSQL (etcd mode, docs/failover.md)",
    ),
    "writes_fenced": (
        "duetime_planner_writes_fenced",
        "Job advances the fence refused inside a planning transaction (etcd mode)",
    ),
    "cold_buckets_loaded": (
        "duetime_planner_cold_buckets_loaded",
        "Cold-tier hour buckets the loader made hot, one transaction each (docs/planner.md)",
    ),
    "cold_jobs_loaded": (
        "duetime_planner_cold_jobs_loaded",
        "Jobs the cold tier's loader moved into the due index ahead of their hour",
    ),
}


class PlannerMetrics:
    """Counters fed by each round's ``PlanStats`` and ``IngestStats`` (never per run)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, *, clusters: int = 1) -> None:
        self._round = {
            field: Counter(name, text, ["cluster"], registry=registry)
            for field, (name, text) in _ROUND_COUNTERS.items()
        }
        self.rounds_failed = Counter(
            "duetime_planner_rounds_failed",
            "Planning rounds of one PostgreSQL cluster that failed (the cluster or the broker was"
            " away); the planner went on with the other clusters",
            ["cluster"],
            registry=registry,
        )
        for cluster in map(str, range(clusters)):  # every series exists from the start, at 0
            self.rounds_failed.labels(cluster)
            for counter in self._round.values():
                counter.labels(cluster)
        self.jobs_ingested = Counter(
            "duetime_jobs_ingested",
            "Job definition records read from the jobs topic, by result",
            ["result"],
            registry=registry,
        )
        for result in ("accepted", "rejected"):
            self.jobs_ingested.labels(result)

    def record_plan(self, stats: PlanStats, *, cluster: int = 0) -> None:
        """One cluster's planning round."""
        label = str(cluster)
        for field, counter in self._round.items():
            value = getattr(stats, field)
            if value:
                counter.labels(label).inc(value)

    def record_failed(self, *, cluster: int = 0) -> None:
        self.rounds_failed.labels(str(cluster)).inc()

    def record_ingest(self, ingested: IngestStats) -> None:
        for result, value in (("accepted", ingested.accepted), ("rejected", ingested.rejected)):
            if value:
                self.jobs_ingested.labels(result).inc(value)
