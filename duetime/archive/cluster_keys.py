"""Where each PostgreSQL cluster's archive lives in the bucket: a key prefix per cluster.

With several clusters (``DUETIME_SHARD_MAP``) each cluster archives its own runs partitions, and
two clusters can hold the same day. Their objects must never meet, so each cluster archives
under a prefix of its own, built from its index in the shard map (an integer, so nothing a user
chose reaches the key)::

    <DUETIME_S3_PREFIX>runs/day=...              cluster 0 (and the only cluster without a map)
    <DUETIME_S3_PREFIX>cluster-1/runs/day=...    cluster 1
    <DUETIME_S3_PREFIX>cluster-2/runs/day=...    cluster 2, ...

Cluster 0 keeps the plain layout, so the archive of a single-cluster system stays where it was
when a second cluster is added. Readers (``duetime runs list --archived``) look under
``cluster_prefixes``: a job's runs are under its cluster's prefix, and looking under all of them
also finds what was archived before its shard moved.

Pure: no I/O.
"""

from __future__ import annotations

from .keys import check_prefix

__all__ = ["cluster_prefix", "cluster_prefixes"]


def cluster_prefix(prefix: str, cluster: int) -> str:
    """The key prefix of cluster ``cluster``'s archive under the configured ``prefix``."""
    if cluster < 0:
        raise ValueError(f"a cluster index is not negative, not {cluster}")
    base = check_prefix(prefix)
    return base if cluster == 0 else f"{base}cluster-{cluster}/"


def cluster_prefixes(prefix: str, clusters: int) -> list[str]:
    """The key prefixes of the archives of ``clusters`` clusters, in cluster order."""
    return [cluster_prefix(prefix, cluster) for cluster in range(clusters)]
