"""The pipeline on two PostgreSQL clusters: every service given ``DUETIME_SHARD_MAP``.

The two clusters are two PostgreSQL servers (``server_cluster_urls``: the session's and a second
one), so nothing can work by sharing one server's connections, locks or sequences. Shards 0-63
live in the first cluster (the home cluster), 64-127 in the second. Jobs of both
halves run end to end (planner -> dispatcher -> worker -> reaper, as processes): each job's runs
are written in its own cluster and nowhere else, a failing job on the second cluster is retried
and goes dead there with its alert sent (the tenant's webhook is a home-cluster table), and the
CLI's run listing merges both clusters.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from duetime.jobdef import parse_jobs
from duetime.shard_map import ShardMap
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply_clusters
from tests.fixtures.clusters import job_ids_on
from tests.fixtures.target import RecordingTarget

from .pipeline import TERMINAL, Pipeline, e2e_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


@pytest.fixture
def two(server_cluster_urls: tuple[str, str], stack: Any, tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(server_cluster_urls[0], stack.kafka_bootstrap, tmp_path)
    p.env["DUETIME_SHARD_MAP"] = ShardMap.even(server_cluster_urls).render()
    p.start_all()
    try:
        yield p
    finally:
        p.stop_all()


def _runs(stores: ClusterStores, cluster: int) -> list[Any]:
    with stores.stores[cluster].engine.begin() as conn:
        return list(conn.execute(text("SELECT job_id, run_id, state, attempt FROM runs")).all())


def test_the_pipeline_runs_each_job_in_its_shards_cluster(
    two: Pipeline, server_cluster_urls: tuple[str, str], http_target: RecordingTarget
) -> None:
    ports = {make_url(url).port for url in server_cluster_urls}
    assert len(ports) == 2, "the two clusters are two servers"
    shard_map = ShardMap.even(server_cluster_urls)
    stores = ClusterStores(shard_map, pool_size=1, application_name="duetime-test")
    try:
        home = job_ids_on(shard_map, 0, 2, "home")
        other = job_ids_on(shard_map, 1, 2, "other")
        once = {"schedule": {"at": "2000-01-01T00:00:00Z"}}
        jobs = [e2e_job(j, f"{http_target.url}/ok/{j}", **once) for j in [*home, *other]]
        failing = job_ids_on(shard_map, 1, 1, "fails")[0]
        jobs.append(
            e2e_job(
                failing,
                f"{http_target.url}/fail/{failing}",
                retry={"max_attempts": 2, "initial_interval_seconds": 0.2},
                **once,
            )
        )
        with stores.home.tx() as tx:
            tx.conn.execute(
                text("INSERT INTO tenants (tenant, alert_webhook) VALUES ('e2e', :u)"),
                {"u": f"{http_target.url}/ok/alerts"},
            )
        jobs_apply_clusters(stores, parse_jobs(jobs))

        def finished() -> bool:
            rows = _runs(stores, 0) + _runs(stores, 1)
            return len(rows) == 5 and all(r.state in TERMINAL for r in rows)

        two.wait_until("every run to finish", finished, timeout=90)
        first, second = _runs(stores, 0), _runs(stores, 1)
        assert {r.job_id for r in first} == set(home)
        assert {r.job_id for r in second} == {*other, failing}
        states = {r.job_id: (r.state, r.attempt) for r in first + second}
        assert states == {
            **{j: ("succeeded", 1) for j in [*home, *other]},
            failing: ("dead", 2),
        }
        for job_id in [*home, *other]:
            assert len(http_target.matching(f"/ok/{job_id}")) == 1
        [alert] = http_target.wait_for("/ok/alerts", 1, timeout=30)
        dead = next(r for r in second if r.job_id == failing)
        assert json.loads(alert.body)["subject"] == str(dead.run_id)

        # The CLI merges both clusters' runs.
        listed = subprocess.run(
            [sys.executable, "-m", "duetime.cli.main", "runs", "list", "--json"],
            env=two.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert {r["job_id"] for r in json.loads(listed.stdout)} == {*home, *other, failing}
    finally:
        stores.close()
