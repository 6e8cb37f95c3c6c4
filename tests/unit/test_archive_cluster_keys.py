"""Each cluster's archive under a prefix of its own (duetime.archive.cluster_keys)."""

from __future__ import annotations

from datetime import date

import pytest

from duetime.archive.cluster_keys import cluster_prefix, cluster_prefixes
from duetime.archive.keys import ArchiveKeyError, data_key, day_from_key, runs_prefix

DIGEST = "ab" * 32
DAY = date(2026, 11, 23)


def test_cluster_zero_keeps_the_single_cluster_layout() -> None:
    assert cluster_prefix("", 0) == ""
    assert cluster_prefix("team/duetime", 0) == "team/duetime/"
    assert data_key(cluster_prefix("", 0), DAY, DIGEST) == f"runs/day=2026-11-23/{DIGEST}.avro"


def test_other_clusters_archive_under_their_index() -> None:
    assert cluster_prefixes("team/duetime/", 3) == [
        "team/duetime/",
        "team/duetime/cluster-1/",
        "team/duetime/cluster-2/",
    ]
    assert data_key(cluster_prefix("", 1), DAY, DIGEST) == (
        f"cluster-1/runs/day=2026-11-23/{DIGEST}.avro"
    )


def test_the_clusters_keys_never_meet() -> None:
    prefixes = cluster_prefixes("p", 3)
    keys = [data_key(prefix, DAY, DIGEST) for prefix in prefixes]
    assert len(set(keys)) == 3
    # A listing of one cluster's runs/ sees none of the others' objects...
    for prefix in prefixes:
        seen = [key for key in keys if key.startswith(runs_prefix(prefix))]
        assert seen == [data_key(prefix, DAY, DIGEST)]
        # ...and reads back the day of its own.
        assert day_from_key(prefix, data_key(prefix, DAY, DIGEST)) == (DAY, DIGEST, "avro")


def test_an_unsafe_configured_prefix_is_still_refused() -> None:
    with pytest.raises(ArchiveKeyError):
        cluster_prefix("../up", 1)
    with pytest.raises(ValueError, match="not negative"):
        cluster_prefix("", -1)
