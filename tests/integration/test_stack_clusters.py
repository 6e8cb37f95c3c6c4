"""The embedded stack with several PostgreSQL clusters, on real servers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from duetime.cli.main import build_parser, main
from duetime.cli.stack_cmd import _MAX_PG_CLUSTERS
from duetime.config import load_settings, read_env_file
from duetime.errors import ConfigError, StackError
from duetime.shard_map import ShardMap
from duetime.store.migrate import available_migrations
from duetime_infra import EmbeddedStack
from duetime_infra.stack import MAX_PG_CLUSTERS
from tests.integration.test_stack import _wait_gone

pytestmark = pytest.mark.integration

_ALL_MIGRATIONS = {path.stem for path in available_migrations()}


def _migrations(url: str) -> set[str]:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        rows = conn.execute("SELECT version FROM duetime_schema_migrations").fetchall()
    return {str(row[0]) for row in rows}


def _stack(data_dir: Path, pg_clusters: int | None = None) -> EmbeddedStack:
    return EmbeddedStack(
        data_dir,
        components=("postgres",),
        durable=False,
        die_with_owner=True,
        pg_clusters=pg_clusters,
    )


def test_two_clusters_come_up_migrated_with_the_map_and_are_reused_then_stopped(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "stack"
    first = _stack(data_dir, 2)
    try:
        urls = first.up()
        clusters = urls.clusters()
        assert len(clusters.urls) == 2 and clusters == ShardMap.even(clusters.urls)
        assert urls.database_url == clusters.home_url == first.postgres.url
        assert [server.url for server in first.clusters] == list(clusters.urls)
        for url in clusters.urls:
            assert _migrations(url) == _ALL_MIGRATIONS
        # Each cluster its own server: own port, data dir and log.
        one, two = first.clusters
        assert one.port != two.port and one.pid != two.pid
        assert (data_dir / "postgres" / "data").is_dir()
        assert (data_dir / "postgres-2" / "data").is_dir()
        assert (data_dir / "logs" / "postgres-2.log").is_file()
        with psycopg.connect(two.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")

        env = read_env_file(data_dir / "stack.env")
        assert env == {
            "DUETIME_DATABASE_URL": clusters.home_url,
            "DUETIME_SHARD_MAP": clusters.render(),
        }
        assert load_settings(data_dir, env={}).clusters() == clusters

        statuses = first.status()
        assert [s.name for s in statuses] == ["postgres", "postgres-2"]
        assert all(s.healthy and not s.external and s.pid for s in statuses)
        pids = [s.pid for s in statuses]

        # Another object on the dir, with or without the number, reuses both servers.
        for again in (_stack(data_dir), _stack(data_dir, 2)):
            assert again.pg_clusters == 2
            assert again.up() == urls
            assert [s.pid for s in again.status()] == pids

        # The number is fixed once the dir holds the clusters' data.
        for other in (1, 3):
            with pytest.raises(StackError, match="has 2 PostgreSQL cluster"):
                _stack(data_dir, other).up()

        _stack(data_dir).down()
        assert _wait_gone([pid for pid in pids if pid is not None]) == []
        assert not (data_dir / "stack.env").exists()
        assert [(s.name, s.pid, s.healthy) for s in first.status()] == [
            ("postgres", None, False),
            ("postgres-2", None, False),
        ]

        # Up again: both come back on their ports, with their data.
        again = _stack(data_dir)
        assert again.up() == urls
        with psycopg.connect(again.clusters[1].url) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == (7,)
        again.down()
    finally:
        first.down()
        _stack(data_dir).down()


def test_a_one_cluster_stack_keeps_its_one_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    stack = _stack(data_dir)
    try:
        urls = stack.up()
        assert urls.shard_map == "" and "DUETIME_SHARD_MAP" not in urls.as_env()
        assert [s.name for s in stack.status()] == ["postgres"]
        with pytest.raises(StackError, match=r"has 1 PostgreSQL cluster.*--pg-clusters 1"):
            _stack(data_dir, 2).up()
        assert [s.name for s in _stack(data_dir).status()] == ["postgres"]
    finally:
        stack.down()


def test_cluster_count_out_of_range_is_refused(tmp_path: Path) -> None:
    assert _MAX_PG_CLUSTERS == MAX_PG_CLUSTERS
    for bad in (0, MAX_PG_CLUSTERS + 1):
        with pytest.raises(ConfigError, match=f"1 to {MAX_PG_CLUSTERS}"):
            _stack(tmp_path, bad)


def test_external_clusters_from_the_shard_map_are_checked_migrated_and_passed_through(
    tmp_path: Path, database_url: str, bare_database_url: str
) -> None:
    home, second = database_url, bare_database_url  # the second not migrated yet
    shard_map_env = {"DUETIME_SHARD_MAP": ShardMap.even([home, second]).render()}
    env = {**os.environ, **shard_map_env}
    stack = EmbeddedStack(tmp_path, components=("postgres",), env=env)
    urls = stack.up()
    assert urls.database_url == home
    assert urls.clusters() == ShardMap.parse(shard_map_env["DUETIME_SHARD_MAP"])
    assert _migrations(second) == _ALL_MIGRATIONS
    statuses = stack.status()
    assert [(s.name, s.url, s.external, s.healthy) for s in statuses] == [
        ("postgres", home, True, True),
        ("postgres-2", second, True, True),
    ]
    assert read_env_file(tmp_path / "stack.env")["DUETIME_SHARD_MAP"] == urls.shard_map
    stack.down()  # never stops an external server
    assert _migrations(home) == _ALL_MIGRATIONS
    # From a shell without the map, status still shows where the second cluster is.
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    plain = EmbeddedStack(tmp_path, components=("postgres",), env=plain_env)
    plain.down()
    assert [(s.name, s.url, s.external) for s in plain.status()][1:] == [
        ("postgres-2", second, True)
    ]

    with pytest.raises(ConfigError, match="external"):
        EmbeddedStack(tmp_path, components=("postgres",), env=env, pg_clusters=3)
    wrong_home = {**env, "DUETIME_DATABASE_URL": second}
    with pytest.raises(ConfigError, match="home cluster"):
        EmbeddedStack(tmp_path, components=("postgres",), env=wrong_home)


def test_cli_pg_clusters_option(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["up", "--pg-clusters", "2"]).pg_clusters == 2
    assert parser.parse_args(["up"]).pg_clusters is None
    assert parser.parse_args(["stack", "up", "--pg-clusters", "8"]).pg_clusters == 8
    for command in (["up"], ["stack", "up"]):
        for bad in ("0", "9", "two", "-1"):
            with pytest.raises(SystemExit) as exited:
                main([*command, f"--pg-clusters={bad}"])
            assert exited.value.code == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "must be 1 to 8" in err, err


def test_cli_stack_up_status_down_with_two_clusters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = str(tmp_path / "cli")
    try:
        assert main(["stack", "up", "--data-dir", data_dir, "--pg-clusters", "2"]) == 0
        printed = capsys.readouterr().out
        env = read_env_file(Path(data_dir) / "stack.env")
        assert f"DUETIME_SHARD_MAP='{env['DUETIME_SHARD_MAP']}'" in printed
        # The printed lines are shell assignments (``eval "$(duetime stack up)"``).
        shell = subprocess.run(
            ["sh", "-c", f'{printed}\nprintf %s "$DUETIME_SHARD_MAP"'],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shell.stdout == env["DUETIME_SHARD_MAP"]
        clusters = ShardMap.parse(env["DUETIME_SHARD_MAP"])
        assert len(clusters.urls) == 2 and env["DUETIME_DATABASE_URL"] == clusters.home_url

        assert main(["stack", "status", "--data-dir", data_dir]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
        by_name = {row[0]: row for row in rows}
        assert set(by_name) == {"postgres", "postgres-2", "kafka", "etcd", "s3"}
        assert by_name["postgres"][3] == clusters.urls[0]
        assert by_name["postgres-2"][3] == clusters.urls[1]

        assert main(["stack", "up", "--data-dir", data_dir, "--pg-clusters", "1"]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("duetime: the stack in") and "--pg-clusters 2" in err
        assert main(["stack", "up", "--data-dir", data_dir, "--no-migrate"]) == 0
    finally:
        assert main(["stack", "down", "--data-dir", data_dir]) == 0
    assert main(["stack", "status", "--data-dir", data_dir]) == 1
    out = capsys.readouterr().out
    assert "postgres-2" in out
