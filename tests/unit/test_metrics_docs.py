"""The metric names in docs/metrics.md, the example alert rules and the Grafana dashboard are the
ones the services export, and every exported metric is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml
from prometheus_client import CollectorRegistry

from duetime_api.metrics import ApiMetrics
from duetime_dispatcher.metrics import DispatcherCollector, lateness_histogram
from duetime_planner.metrics import PlannerMetrics
from duetime_reaper.metrics import ReaperMetrics
from duetime_workers.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"\bduetime_[a-z_]+")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def exported() -> set[str]:
    registry = CollectorRegistry()
    PlannerMetrics(registry)
    WorkerMetrics(registry)
    lateness_histogram(registry)
    dispatcher = SimpleNamespace(
        holding=SimpleNamespace(
            counters=SimpleNamespace(
                received=0, released=0, duplicates=0, undecodable=0, release_failures=0, shed=0
            ),
            held=0,
        ),
        recorder=SimpleNamespace(recorded=0),
        throttle=SimpleNamespace(throttled_total=0, waiting=0),
        intake_paused=False,
    )
    registry.register(DispatcherCollector(dispatcher))  # type: ignore[arg-type]
    names = {family.name for family in registry.collect()}
    reaper = CollectorRegistry()  # its names overlap the worker's: another process
    ReaperMetrics(reaper)
    api = CollectorRegistry()  # the same
    ApiMetrics(api)
    names |= {family.name for family in reaper.collect()}
    return names | {family.name for family in api.collect()}


def mentioned(text: str) -> set[str]:
    names = set()
    for name in _NAME.findall(text):
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names


def test_alert_rules_and_the_dashboard_use_exported_metrics() -> None:
    names = exported()
    rules = yaml.safe_load((ROOT / "infra/prometheus/alerts.yml").read_text())
    exprs = " ".join(rule["expr"] for group in rules["groups"] for rule in group["rules"])
    assert mentioned(exprs) <= names
    dashboard = json.loads((ROOT / "infra/grafana/duetime-dashboard.json").read_text())
    targets = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    assert mentioned(targets) <= names
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_metrics_table_documents_exactly_what_is_exported() -> None:
    doc = (ROOT / "docs/metrics.md").read_text()
    table = "\n".join(line for line in doc.splitlines() if line.startswith("| `duetime_"))
    assert mentioned(table) == exported()
