"""Planner processes on two PostgreSQL clusters (``DUETIME_SHARD_MAP``: shards 0-63 in the first,
64-127 in the second), as ``duetime service planner`` runs them.

- two planners in etcd mode split the 128 shards; each shard's fence row is in its own cluster,
  every job is planned in its cluster only, and a killed planner's shards of both clusters move
  to the other, which plans their jobs on;
- a cluster that cannot take writes stops only its own planning: the other cluster's jobs are
  planned on meanwhile, and the failed cluster catches up when it is back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from duetime.coord.rendezvous import assignment
from duetime.jobdef import parse_jobs
from duetime.shard_map import ShardMap
from duetime.sharding import SHARD_COUNT
from duetime.store import Store
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply_clusters
from duetime_infra import StackUrls
from tests.fixtures.clusters import job_ids_on

from .pipeline import Pipeline

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

PLANNER = ["--lookahead", "2", "--max-lookahead", "2", "--tick", "0.2"]
URL = "http://127.0.0.1:9/never-called"  # no dispatcher or worker runs in these tests


class _Clusters:
    def __init__(self, p: Pipeline, urls: tuple[str, str]) -> None:
        self.p = p
        self.map = ShardMap.even(urls)
        self.stores = ClusterStores(self.map, pool_size=2, application_name="duetime-test")

    def sql(self, cluster: int, statement: str) -> list[Any]:
        with self.stores.stores[cluster].engine.begin() as conn:
            result = conn.execute(text(statement))
            return list(result.all()) if result.returns_rows else []

    def apply(self, job_ids: list[str]) -> None:
        jobs_apply_clusters(self.stores, parse_jobs([_job(j) for j in job_ids]))

    def ids(self, cluster: int, count: int, prefix: str) -> list[str]:
        return job_ids_on(self.map, cluster, count, prefix)

    def planned(self, cluster: int) -> dict[str, int]:
        """Runs per job in ``cluster``."""
        rows = self.sql(cluster, "SELECT job_id, count(*) AS n FROM runs GROUP BY job_id")
        return {r.job_id: r.n for r in rows}

    def owners(self, cluster: int) -> dict[int, str]:
        return {r.shard_id: r.owner for r in self.sql(cluster, "SELECT * FROM shard_owners")}


@pytest.fixture
def two(cluster_urls: tuple[str, str], stack: StackUrls, tmp_path: Path) -> Iterator[_Clusters]:
    p = Pipeline(cluster_urls[0], stack.kafka_bootstrap, tmp_path)
    p.env["DUETIME_SHARD_MAP"] = ShardMap.even(cluster_urls).render()
    clusters = _Clusters(p, cluster_urls)
    try:
        yield clusters
    finally:
        p.stop_all()
        clusters.stores.close()


def _job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "schedule": {"interval": "PT1S", "start_at": "2026-01-01T00:00:00Z"},
        "catch_up": "skip",
        "target": {"http": {"url": URL}},
        "target_service": "clusters",
    }


def _start(p: Pipeline, name: str, *extra: str) -> str:
    p.start("planner", instance=name, args=[*PLANNER, *extra])
    found = p.wait_until(
        f"{name} to start",
        lambda: re.search(r"planner\.started member=(\S+)", p.log_text(name)),
        timeout=30,
    )
    assert "clusters=2" in p.log_text(name)
    return found.group(1)


def test_two_planners_fence_each_shard_in_its_cluster_and_take_over_on_both(
    two: _Clusters, stack: StackUrls
) -> None:
    p = two.p
    p.env["DUETIME_ETCD_ENDPOINTS"] = stack.etcd_endpoints
    a, b = _start(p, "planner-a"), _start(p, "planner-b")
    wanted = assignment([a, b], range(SHARD_COUNT))
    expected = [
        {s: m for m, shards in wanted.items() for s in shards if two.map.cluster_of[s] == c}
        for c in (0, 1)
    ]
    p.wait_until(
        "both planners to claim their shards, each in its shard's cluster",
        lambda: [two.owners(0), two.owners(1)] == expected,
        45,
    )
    first, second = two.ids(0, 12, "c0"), two.ids(1, 12, "c1")
    two.apply(first + second)
    p.wait_until(
        "every job planned in its cluster",
        lambda: set(two.planned(0)) == set(first) and set(two.planned(1)) == set(second),
        30,
    )
    for name in ("planner-a", "planner-b"):
        assert "runs.planned" in p.log_text(name), p.logs()
    # a is killed: b claims a's shards in both clusters and plans their jobs on.
    before = [two.planned(0), two.planned(1)]
    p.kill("planner-a")
    everything = [dict.fromkeys(two.map.shards_of(c), b) for c in (0, 1)]
    p.wait_until(
        "b to own every shard of both clusters",
        lambda: [two.owners(0), two.owners(1)] == everything,
        30,
    )
    p.wait_until(
        "every job of both clusters planned further",
        lambda: all(
            two.planned(c).get(j, 0) > before[c][j]
            for c, ids in ((0, first), (1, second))
            for j in ids
        ),
        30,
    )
    assert set(two.planned(0)) == set(first) and set(two.planned(1)) == set(second)


def _read_only(store: Store, on: bool) -> None:
    """Every session of ``store``'s database read-only (``on``) or not, the open ones ended so
    that the planner's next connection gets it: a cluster that cannot take writes."""
    database = store.engine.url.database
    setting = (
        "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    )
    with store.engine.begin() as conn:
        conn.execute(text("SET transaction_read_only = off"))
        conn.execute(text(f'ALTER DATABASE "{database}" {setting}'))
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :d AND pid <> pg_backend_pid()"
            ),
            {"d": database},
        )
    store.engine.dispose()


def test_a_cluster_that_cannot_write_stops_only_its_own_planning(two: _Clusters) -> None:
    p = two.p
    _start(p, "planner", "--shard-mode", "skip-locked")
    first, second = two.ids(0, 4, "up"), two.ids(1, 4, "down")
    two.apply(first + second)
    p.wait_until(
        "every job planned",
        lambda: set(two.planned(0)) == set(first) and set(two.planned(1)) == set(second),
        30,
    )
    other = two.stores.stores[1]
    _read_only(other, True)
    try:
        p.wait_until(
            "the second cluster's round to fail",
            lambda: "planner.round_failed cluster=1" in p.log_text("planner"),
            30,
        )
        stalled = two.planned(1)
        ahead = two.planned(0)
        p.wait_until(
            "the first cluster's jobs planned on",
            lambda: all(two.planned(0)[j] > ahead[j] + 2 for j in first),
            30,
        )
        assert two.planned(1) == stalled  # nothing could be written there
    finally:
        _read_only(other, False)
    p.wait_until(
        "the second cluster planned again",
        lambda: all(two.planned(1)[j] > stalled[j] for j in second),
        30,
    )
    assert "planner.round_failed cluster=0" not in p.log_text("planner")
