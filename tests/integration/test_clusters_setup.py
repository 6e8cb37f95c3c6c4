"""Several PostgreSQL clusters: the test fixtures and ``duetime migrate`` on every cluster."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from duetime.config import load_settings
from duetime.shard_map import ShardMap

pytestmark = pytest.mark.integration


def _conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _migrations(url: str) -> set[str]:
    with psycopg.connect(_conninfo(url)) as conn:
        rows = conn.execute("SELECT version FROM duetime_schema_migrations").fetchall()
    return {str(row[0]) for row in rows}


def test_cluster_urls_are_two_separate_migrated_databases(cluster_urls: tuple[str, str]) -> None:
    first, second = cluster_urls
    assert first != second
    assert _migrations(first) and _migrations(first) == _migrations(second)
    with psycopg.connect(_conninfo(first), autocommit=True) as conn:
        conn.execute("CREATE TABLE only_in_first (x int)")
    with psycopg.connect(_conninfo(second)) as conn:
        found = conn.execute("SELECT to_regclass('only_in_first')").fetchone()
    assert found == (None,)


def test_shard_map_env_is_read_as_two_clusters(
    shard_map_env: dict[str, str], cluster_urls: tuple[str, str], tmp_path: Path
) -> None:
    settings = load_settings(tmp_path, env=shard_map_env)
    assert settings.clusters() == ShardMap.even(cluster_urls)
    assert settings.database_url == cluster_urls[0]
