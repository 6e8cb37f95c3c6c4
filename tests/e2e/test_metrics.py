"""/metrics on every service, scraped after a demo run on the real stack: the counts of released,
started, succeeded and dead runs are those the database holds."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from duetime.cli.demo import DemoTarget, demo_jobs
from duetime.store.jobs import jobs_apply
from duetime_infra.ports import find_free_port

from .pipeline import SERVICE_ARGS, TERMINAL, Pipeline

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def _free_port() -> int:
    # Below the ephemeral range: a port there is never some connection's source port.
    return find_free_port()


def scrape(url: str) -> dict[str, float]:
    """Every unlabelled sample of a /metrics page, and labelled ones as ``name{k=v,...}``."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


@pytest.fixture
def demo_pipeline(
    database_url: str, stack: Any, tmp_path: Path
) -> Iterator[tuple[Pipeline, dict[str, str]]]:
    pipeline = Pipeline(database_url, stack.kafka_bootstrap, tmp_path)
    urls: dict[str, str] = {}
    try:
        for name in SERVICE_ARGS:
            port = _free_port()
            urls[name] = f"http://127.0.0.1:{port}/metrics"
            pipeline.start(name, env={"DUETIME_METRICS_PORT": str(port)})
        yield pipeline, urls
    finally:
        pipeline.stop_all()


def test_scraped_counts_match_the_database_after_a_demo_run(
    demo_pipeline: tuple[Pipeline, dict[str, str]],
) -> None:
    pipeline, urls = demo_pipeline
    target = DemoTarget()
    target.start()
    try:
        with pipeline.store.tx() as tx:
            jobs_apply(tx, demo_jobs(target.port))
        pipeline.wait_until(
            "a dead run and a few succeeded ones",
            lambda: (
                pipeline.sql(
                    "SELECT count(*) FILTER (WHERE state = 'dead') >= 1"
                    " AND count(*) FILTER (WHERE state = 'succeeded') >= 3 AS done FROM runs"
                )[0].done
            ),
            timeout=90,
        )
        pipeline.sql("UPDATE jobs SET paused = true")
        pipeline.wait_until(
            "every run to end",
            lambda: (
                pipeline.sql(
                    "SELECT count(*) AS n FROM runs WHERE state <> ALL(:t)", t=list(TERMINAL)
                )[0].n
                == 0
            ),
            timeout=60,
        )
    finally:
        target.stop()

    def database() -> dict[str, int]:
        row = pipeline.sql(
            "SELECT (SELECT count(*) FROM run_attempts) AS attempts,"
            " (SELECT count(*) FROM runs WHERE state = 'succeeded') AS succeeded,"
            " (SELECT count(*) FROM runs WHERE state = 'dead') AS dead,"
            " (SELECT count(*) FROM runs) AS runs"
        )[0]
        return dict(row._mapping)

    def metrics() -> dict[str, float]:
        planner, dispatcher = scrape(urls["planner"]), scrape(urls["dispatcher"])
        worker, reaper = scrape(urls["worker"]), scrape(urls["reaper"])
        return {
            "planned": planner["duetime_runs_planned_total{cluster=0}"],
            "released": dispatcher["duetime_runs_released_total"],
            "lateness_observed": dispatcher["duetime_release_lateness_seconds_count"],
            "started": worker["duetime_runs_started_total"],
            "succeeded": worker["duetime_runs_succeeded_total"]
            + dispatcher["duetime_runs_succeeded_total"],
            "dead": worker["duetime_runs_dead_total"] + reaper["duetime_runs_dead_total"],
            "dead_published": reaper["duetime_runs_dead_published_total"],
            "fenced": worker["duetime_completions_fenced_total"],
            "in_flight": worker["duetime_runs_in_flight"],
        }

    def expected(db: dict[str, int]) -> dict[str, float]:
        return {
            "planned": db["runs"],
            # Every attempt was released once and claimed once (no duplicates in a healthy run).
            "released": db["attempts"],
            "lateness_observed": db["attempts"],
            "started": db["attempts"],
            "succeeded": db["succeeded"],
            "dead": db["dead"],
            "dead_published": db["dead"],
            "fenced": 0,
            "in_flight": 0,
        }

    # The reaper publishes dead runs and the worker's gauge is sampled within a second or two
    # of the database: wait for the scrape to agree, then say what differs if it never does.
    last: dict[str, Any] = {}

    def agree() -> bool:
        db = database()
        last.update(db=db, metrics=metrics())
        return bool(last["metrics"] == expected(db))

    with contextlib.suppress(pytest.fail.Exception):
        pipeline.wait_until("the scraped counts to match the database", agree, timeout=30)
    db = last["db"]
    assert db["dead"] >= 1 and db["succeeded"] >= 3
    assert last["metrics"] == expected(db), pipeline.logs()
