"""Several PostgreSQL clusters: the test fixtures and ``duetime migrate`` on every cluster."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from duetime.cli.main import main
from duetime.config import load_settings
from duetime.shard_map import ShardMap
from duetime.store.migrate import available_migrations
from duetime_infra import find_free_port

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


def test_migrate_applies_the_migrations_on_every_cluster(
    database_url: str,
    bare_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The home cluster already migrated, the other empty: migrate brings both to the schema.
    shard_map = ShardMap.even([database_url, bare_database_url])
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DUETIME_DATABASE_URL", raising=False)
    monkeypatch.setenv("DUETIME_SHARD_MAP", shard_map.render())
    everything = {path.stem for path in available_migrations()}

    assert main(["migrate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "cluster 1 of 2: schema is up to date"
    assert lines[1] == f"cluster 2 of 2: applied: {', '.join(sorted(everything))}"
    assert _migrations(database_url) == _migrations(bare_database_url) == everything

    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "cluster 1 of 2: schema is up to date",
        "cluster 2 of 2: schema is up to date",
    ]


def test_migrate_names_the_cluster_it_cannot_migrate(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = find_free_port()
    unreachable = f"postgresql://duetime@127.0.0.1:{port}/duetime"
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DUETIME_DATABASE_URL", raising=False)
    monkeypatch.setenv("DUETIME_SHARD_MAP", ShardMap.even([database_url, unreachable]).render())

    assert main(["migrate"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "cluster 1 of 2: schema is up to date\n"
    assert captured.err.startswith(f"duetime: cluster 2 of 2: 127.0.0.1:{port}: migration failed")
    assert captured.err.count("\n") == 1
