"""The shard map: parsing, validation, routing of batches (duetime/shard_map.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duetime.config import load_settings
from duetime.errors import ConfigError
from duetime.shard_map import ShardMap
from duetime.sharding import SHARD_COUNT, shard_for

A = "postgresql://u:pw@pg-a:5432/duetime"
B = "postgresql://u:pw@pg-b:5432/duetime"


def test_even_split_round_trips_through_its_text_form() -> None:
    shard_map = ShardMap.even([A, B])
    assert shard_map.render() == f"0-63={A};64-127={B}"
    assert ShardMap.parse(shard_map.render()) == shard_map
    assert shard_map.shards_of(0) == frozenset(range(64))
    assert shard_map.shards_of(1) == frozenset(range(64, SHARD_COUNT))
    assert shard_map.home_url == A


def test_ranges_may_interleave_and_name_a_url_twice() -> None:
    shard_map = ShardMap.parse(f"0-9={A}\n10-19={B}; 20-127={A}")
    assert shard_map.urls == (A, B)
    assert shard_map.url_for_shard(15) == B
    assert shard_map.url_for_shard(20) == A
    assert ShardMap.parse(shard_map.render()) == shard_map


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (f"0-63={A}", "unplaced: 64-127"),
        (f"0-127={A};5={B}", "shard 5 twice"),
        (f"0-128={A}", "outside shards"),
        (f"9-3={A}", "backwards"),
        ("0-127", "not FIRST-LAST=URL"),
    ],
)
def test_a_bad_map_is_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ShardMap.parse(text)


def test_a_password_never_reaches_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        ShardMap.parse("0-x=postgresql://u:secret@h/db")
    assert "secret" not in str(caught.value)


def test_split_groups_a_batch_by_each_jobs_cluster_keeping_order() -> None:
    shard_map = ShardMap.even([A, B])
    jobs = [f"job-{n}" for n in range(200)]
    parts = shard_map.split(jobs, lambda j: j)
    assert set(parts) == {0, 1}
    for index, part in parts.items():
        assert all(shard_map.cluster_of[shard_for(j)] == index for j in part)
        assert part == [j for j in jobs if j in set(part)]
    assert ShardMap.single(A).split(jobs, lambda j: j) == {0: jobs}


def test_settings_take_the_map_and_the_home_cluster(tmp_path: Path) -> None:
    text = f"0-63={A};64-127={B}"
    settings = load_settings(tmp_path, {"DUETIME_SHARD_MAP": text})
    assert settings.database_url == A
    assert settings.clusters() == ShardMap.parse(text)
    one = load_settings(tmp_path, {"DUETIME_DATABASE_URL": B})
    assert one.clusters() == ShardMap.single(B)
    with pytest.raises(ConfigError, match="home cluster"):
        load_settings(tmp_path, {"DUETIME_SHARD_MAP": text, "DUETIME_DATABASE_URL": B})
