"""``duetime up --demo`` on two PostgreSQL clusters (``--pg-clusters 2``): each demo job is written
to its own shard's cluster, and the periodic run summary counts the runs of every cluster."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from duetime.cli.demo import demo_jobs, demo_jobs_apply
from duetime.cli.up_cmd import runs_summary
from duetime.shard_map import ShardMap
from duetime.store.clusters import ClusterStores

from .test_archive import _insert_run
from .test_jobs_clusters import _stored

pytestmark = pytest.mark.integration


@pytest.fixture
def clusters(cluster_urls: tuple[str, str]) -> Iterator[ClusterStores]:
    stores = ClusterStores(ShardMap.even(cluster_urls), pool_size=1)
    yield stores
    stores.close()


def test_demo_jobs_land_in_their_own_clusters(clusters: ClusterStores) -> None:
    ids = [job.job_id for job in demo_jobs(8000)]
    where = {job_id: clusters.shard_map.cluster_of_job(job_id) for job_id in ids}
    assert set(where.values()) == {0, 1}  # the demo covers both clusters of --pg-clusters 2

    writes = demo_jobs_apply(clusters, 8000)
    assert [(w.job_id, w.action) for w in writes] == [(job_id, "created") for job_id in ids]
    assert _stored(clusters) == [
        {job_id for job_id, cluster in where.items() if cluster == index} for index in (0, 1)
    ]
    # A second `duetime up --demo` (another target port) updates them where they are.
    assert {w.action for w in demo_jobs_apply(clusters, 8001)} == {"updated"}
    assert _stored(clusters) == [
        {job_id for job_id, cluster in where.items() if cluster == index} for index in (0, 1)
    ]


def test_the_run_summary_counts_every_cluster(clusters: ClusterStores) -> None:
    demo_jobs_apply(clusters, 8000)
    now = datetime.now(UTC).replace(microsecond=0)
    ids = [job.job_id for job in demo_jobs(8000)]
    for n, job_id in enumerate(ids):
        store = clusters.for_job(job_id)
        for minute in range(n + 1):
            _insert_run(store, job_id, now - timedelta(minutes=minute))
        _insert_run(store, job_id, now - timedelta(minutes=30), state="dead", attempts=3)

    assert runs_summary(clusters) == [
        f"job_id={job_id} dead=1 succeeded={ids.index(job_id) + 1}" for job_id in sorted(ids)
    ]
    # The newest runs of all clusters together, as one cluster holding them all would count.
    assert runs_summary(clusters, limit=len(ids)) == [
        f"job_id={job_id} succeeded=1" for job_id in sorted(ids)
    ]
