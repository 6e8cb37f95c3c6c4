"""/metrics: the endpoint's address from the environment, the batch histogram, and the counts the
worker and reaper take from a batch statement's results."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from duetime.bus.topics import TopicCatalog
from duetime.errors import ConfigError
from duetime.metrics import BatchHistogram, metrics_address, serve_metrics
from duetime.store import AttemptEnd
from duetime_infra.ports import find_free_port
from duetime_planner.ingest import IngestStats
from duetime_planner.metrics import PlannerMetrics
from duetime_planner.planner import PlanStats
from duetime_reaper.expiry import ExpiryCounts
from duetime_reaper.metrics import ReaperMetrics, consumer_groups
from duetime_workers.metrics import WorkerMetrics
from duetime_workers.processes import _METRICS_DIR_PREFIX, _remove_stale_metrics_dirs


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    assert value is not None, name
    return value


def test_address_from_the_environment() -> None:
    assert metrics_address({}) is None
    assert metrics_address({"DUETIME_METRICS_PORT": "0"}) is None
    assert metrics_address({"DUETIME_METRICS_PORT": "9470"}) == ("127.0.0.1", 9470)
    assert metrics_address({"DUETIME_METRICS_PORT": "9470", "DUETIME_METRICS_HOST": "0.0.0.0"}) == (
        "0.0.0.0",
        9470,
    )
    for bad in ("x", "70000", "-1"):
        with pytest.raises(ConfigError, match="DUETIME_METRICS_PORT"):
            metrics_address({"DUETIME_METRICS_PORT": bad})


def test_batch_histogram_counts_a_batch_into_cumulative_buckets() -> None:
    registry = CollectorRegistry()
    histogram = BatchHistogram(
        "t_lateness_seconds", "test", buckets=(0.01, 0.1, 1.0), registry=registry
    )
    histogram.observe_many([5.0, 10.0, 10.0, 50.0, 100.0, 2000.0], scale=1000.0)  # milliseconds
    histogram.observe_many([])
    histogram.observe_many([0.5])
    assert _value(registry, "t_lateness_seconds_bucket", {"le": "0.01"}) == 3  # 5, 10, 10 ms
    assert _value(registry, "t_lateness_seconds_bucket", {"le": "0.1"}) == 5
    assert _value(registry, "t_lateness_seconds_bucket", {"le": "1.0"}) == 6
    assert _value(registry, "t_lateness_seconds_bucket", {"le": "+Inf"}) == 7
    assert _value(registry, "t_lateness_seconds_count") == 7
    assert _value(registry, "t_lateness_seconds_sum") == pytest.approx(2.175 + 0.5)


def test_the_endpoint_serves_the_registry_and_a_taken_port_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    Counter("t_things", "test", registry=registry).inc(3)
    env = {"DUETIME_METRICS_PORT": str(_free_port())}
    endpoint = serve_metrics("test", env, registry)
    assert endpoint is not None
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            text = response.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["t_things"].samples[0].value == 3
        # A taken port: the service runs on without an endpoint, and says so.
        with caplog.at_level(logging.ERROR, logger="duetime.metrics"):
            assert serve_metrics("test", env, CollectorRegistry()) is None
        assert "metrics.failed" in caplog.text and env["DUETIME_METRICS_PORT"] in caplog.text
    finally:
        endpoint.close()
    assert serve_metrics("test", {}, registry) is None


def _end(state: str, outcome: str = "failed") -> AttemptEnd:
    return AttemptEnd(uuid.uuid4(), datetime.now(UTC), 1, uuid.uuid4(), state, outcome)


def test_worker_counts_a_completion_statement_by_outcome() -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    ends = [
        _end("succeeded", "succeeded"),
        _end("succeeded", "succeeded"),
        _end("scheduled"),
        _end("dead"),
        _end("scheduled", "handed_back"),
        _end("succeeded", "succeeded"),  # fenced: its token is not accepted
    ]
    metrics.count_ends(ends, [True] * 5 + [False])
    metrics.count_claims(6)
    metrics.count_claims(0)
    assert _value(registry, "duetime_runs_started_total") == 6
    assert _value(registry, "duetime_runs_succeeded_total") == 2
    assert _value(registry, "duetime_runs_retried_total") == 1
    assert _value(registry, "duetime_runs_dead_total") == 1
    assert _value(registry, "duetime_runs_handed_back_total") == 1
    assert _value(registry, "duetime_completions_fenced_total") == 1


def test_reaper_counts_an_expiry_batch_by_source() -> None:
    registry = CollectorRegistry()
    metrics = ReaperMetrics(registry)
    metrics.count_expired(ExpiryCounts(expired=3, retried=2, dead=1), "stream")
    metrics.count_expired(ExpiryCounts(expired=1, retried=0, dead=1), "scan")
    metrics.count_dead_published(2)
    assert _value(registry, "duetime_lease_expiries_total", {"source": "stream"}) == 3
    assert _value(registry, "duetime_lease_expiries_total", {"source": "scan"}) == 1
    assert _value(registry, "duetime_runs_retried_total") == 2
    assert _value(registry, "duetime_runs_dead_total") == 2
    assert _value(registry, "duetime_runs_dead_published_total") == 2


def test_every_consumer_group_and_its_topics() -> None:
    catalog = TopicCatalog("p.")
    groups = consumer_groups(catalog)
    assert groups["p.workers"] == ("p.runs.ready",)
    assert groups["p.reaper"] == ("p.runs.heartbeats", "p.runs.results")
    assert groups["p.dispatcher"] == catalog.due_topics
    assert groups["p.planner-ingest"] == ("p.jobs",)


def _free_port() -> int:
    # Below the ephemeral range: a port there is never some connection's source port.
    return find_free_port()


def test_planner_counts_a_round_from_its_stats() -> None:
    registry = CollectorRegistry()
    metrics = PlannerMetrics(registry)
    metrics.record_plan(PlanStats(jobs_planned=4, runs_created=5, runs_published=6, runs_swept=1))
    metrics.record_ingest(IngestStats(accepted=2, rejected=1))
    metrics.record_plan(PlanStats(runs_created=1))
    metrics.record_ingest(IngestStats())
    one = {"cluster": "0"}
    assert _value(registry, "duetime_jobs_planned_total", one) == 4
    assert _value(registry, "duetime_runs_planned_total", one) == 6
    assert _value(registry, "duetime_runs_published_total", one) == 6
    assert _value(registry, "duetime_runs_publish_failures_total", one) == 0
    assert _value(registry, "duetime_runs_swept_total", one) == 1
    assert _value(registry, "duetime_planner_rounds_failed_total", one) == 0
    assert _value(registry, "duetime_jobs_ingested_total", {"result": "accepted"}) == 2
    assert _value(registry, "duetime_jobs_ingested_total", {"result": "rejected"}) == 1


def test_planner_counts_each_cluster_under_its_label() -> None:
    registry = CollectorRegistry()
    metrics = PlannerMetrics(registry, clusters=2)
    metrics.record_plan(PlanStats(jobs_planned=3), cluster=0)
    metrics.record_plan(PlanStats(jobs_planned=5), cluster=1)
    metrics.record_failed(cluster=1)
    assert _value(registry, "duetime_jobs_planned_total", {"cluster": "0"}) == 3
    assert _value(registry, "duetime_jobs_planned_total", {"cluster": "1"}) == 5
    assert _value(registry, "duetime_planner_rounds_failed_total", {"cluster": "0"}) == 0
    assert _value(registry, "duetime_planner_rounds_failed_total", {"cluster": "1"}) == 1


def test_worker_metrics_dirs_of_dead_supervisors_are_removed() -> None:
    dead_pid = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_pid.wait()  # reaped: its pid names no process now
    base = Path(tempfile.gettempdir())
    dead = Path(tempfile.mkdtemp(prefix=f"{_METRICS_DIR_PREFIX}{dead_pid.pid}-", dir=base))
    alive = Path(tempfile.mkdtemp(prefix=f"{_METRICS_DIR_PREFIX}{os.getpid()}-", dir=base))
    try:
        _remove_stale_metrics_dirs()
        assert not dead.exists()
        assert alive.exists()
    finally:
        for path in (dead, alive):
            if path.exists():
                path.rmdir()
