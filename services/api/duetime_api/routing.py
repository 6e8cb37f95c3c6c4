"""Which PostgreSQL cluster a request reads or writes (docs/clusters.md, "CLI and API").

A job and its runs live in the cluster of the job's shard: a request naming a job goes there.
A run id alone does not say which job it is of (it is a hash of the job id and the occurrence),
so a request naming only a run looks it up on each cluster in turn, and acts where it is found.
Lists read every cluster and merge (``duetime.store.fanout``). Tokens, sign-in links, targets and
the forecast's limits belong to no shard and stay in the home cluster (``store_of``).

With one cluster every function answers the one store, without a lookup.
"""

from __future__ import annotations

import uuid

from fastapi import Request

from duetime.store import Store
from duetime.store import api as views
from duetime.store.clusters import ClusterStores

__all__ = ["clusters_of", "job_store", "run_store", "stores_for"]


def clusters_of(request: Request) -> ClusterStores:
    """The application's stores, one per cluster (``create_app``)."""
    clusters: ClusterStores = request.app.state.clusters
    return clusters


def job_store(request: Request, job_id: str) -> Store:
    """The store of the job's cluster."""
    return clusters_of(request).for_job(job_id)


def stores_for(request: Request, job_id: str | None) -> list[Store]:
    """The stores a list reads: the job's cluster for one job's rows, else every cluster."""
    clusters = clusters_of(request)
    return [clusters.for_job(job_id)] if job_id is not None else list(clusters)


def run_store(request: Request, tenant: str | None, run_id: uuid.UUID) -> Store:
    """The store of the cluster holding the run (as ``tenant`` may see it); with no such run,
    the home cluster's, where the caller's own query finds nothing and answers 404."""
    clusters = clusters_of(request)
    if len(clusters) == 1:
        return clusters.home
    for store in clusters:
        with store.tx() as tx:
            if views.runs_get(tx.conn, tenant, run_id) is not None:
                return store
    return clusters.home
