"""Job writes over two PostgreSQL clusters (``jobs_apply_clusters``): each job in its shard's
cluster, results in item order, tenant quotas counted over both and locked in the home cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from duetime.errors import QuotaExceeded
from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.shard_map import ShardMap
from duetime.store import tenants
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply_clusters

pytestmark = pytest.mark.integration


@pytest.fixture
def clusters(cluster_urls: tuple[str, str]) -> Iterator[ClusterStores]:
    stores = ClusterStores(ShardMap.even(cluster_urls), pool_size=2)
    yield stores
    stores.close()


def _job(job_id: str, tenant: str = "default") -> JobDefinition:
    return parse_job(
        {
            "id": job_id,
            "tenant": tenant,
            "schedule": {"cron": "0 0 * * *"},
            "target": {"http": {"url": "https://example.com/hook"}},
        }
    )


def _ids_on(clusters: ClusterStores, cluster: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"{prefix}-{n}"
        if clusters.shard_map.cluster_of_job(job_id) == cluster:
            found.append(job_id)
        n += 1
    return found


def _stored(clusters: ClusterStores) -> list[set[str]]:
    out: list[set[str]] = []
    for store in clusters:
        with store.engine.begin() as conn:
            out.append({r.job_id for r in conn.execute(text("SELECT job_id FROM jobs"))})
    return out


def test_each_job_lands_in_its_shards_cluster_and_only_there(clusters: ClusterStores) -> None:
    a = _ids_on(clusters, 0, 3, "a")
    b = _ids_on(clusters, 1, 3, "b")
    batch = [_job(j) for pair in zip(a, b, strict=True) for j in pair]
    writes = jobs_apply_clusters(clusters, batch)
    assert [w.job_id for w in writes] == [j.job_id for j in batch]
    assert {w.action for w in writes} == {"created"}
    assert _stored(clusters) == [set(a), set(b)]

    # Again: unchanged; then a tombstone on the second cluster and a re-definition.
    again = jobs_apply_clusters(clusters, [_job(a[0]), _job(b[0], "other")])
    assert [w.action for w in again] == ["updated", "updated"]
    gone = jobs_apply_clusters(clusters, [JobTombstone(b[1], 99), JobTombstone("nope", 1)])
    assert [w.action for w in gone] == ["deleted", "not_found"]
    assert _stored(clusters) == [set(a), set(b) - {b[1]}]


def test_a_tenant_quota_counts_the_jobs_of_every_cluster(clusters: ClusterStores) -> None:
    with clusters.home.tx() as tx:
        tenants.set_tenant(tx.conn, "acme", max_jobs=4)
    a = _ids_on(clusters, 0, 3, "qa")
    b = _ids_on(clusters, 1, 3, "qb")
    jobs_apply_clusters(clusters, [_job(a[0], "acme"), _job(a[1], "acme"), _job(b[0], "acme")])

    # 3 of 4 used (two in the home cluster, one in the other): two more is one too many.
    with pytest.raises(QuotaExceeded, match="acme may have at most 4 jobs"):
        jobs_apply_clusters(clusters, [_job(b[1], "acme"), _job(a[2], "acme")])
    assert _stored(clusters) == [{a[0], a[1]}, {b[0]}]  # a job file: nothing of it written

    partial = jobs_apply_clusters(
        clusters, [_job(b[1], "acme"), _job(a[2], "acme"), _job(b[2], "other")], partial=True
    )
    assert [w.action for w in partial] == ["created", "over_quota", "created"]
    assert "acme" in partial[1].reason
    assert _stored(clusters) == [{a[0], a[1]}, {b[0], b[1], b[2]}]
