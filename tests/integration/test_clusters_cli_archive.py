"""``duetime archive`` and ``duetime runs list --archived`` on two PostgreSQL clusters
(DUETIME_SHARD_MAP) and a real S3 server: each cluster's old partitions archived under its own
key prefix, a cluster that does not answer reported without stopping the other, and a job's
archived runs read back from every cluster's prefix, merged newest first."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.cli.main import main
from duetime.shard_map import ShardMap
from duetime.store import Store
from tests.fixtures.clusters import job_ids_on
from tests.fixtures.s3 import S3Server

from .test_archive import OLD, OLDER, RECENT, _at, _insert_run, _partition_exists
from .test_cli_no_stack import _closed_port

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}/"


def _point_cli(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], s3: dict[str, str], tmp_path: Path
) -> None:
    for key, value in {**env, **s3}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))


@pytest.fixture
def stores(
    shard_map_env: dict[str, str],
    cluster_urls: tuple[str, str],
    s3_server: S3Server,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[list[Store]]:
    """The CLI pointed at both clusters and at the session's S3 server under a prefix of this
    test's own; a store on each cluster."""
    _point_cli(monkeypatch, shard_map_env, s3_server.env(prefix), tmp_path)
    opened = [Store(url, pool_size=1) for url in cluster_urls]
    yield opened
    for store in opened:
        store.close()


def _keys(s3_server: S3Server, prefix: str) -> list[str]:
    return S3ObjectStore(S3Settings.require(env=s3_server.env(prefix))).list_keys(prefix)


def _out(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_archive_archives_each_cluster_under_its_prefix_and_lists_read_every_prefix(
    stores: list[Store],
    cluster_urls: tuple[str, str],
    s3_server: S3Server,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shard_map = ShardMap.even(cluster_urls)
    home_job = job_ids_on(shard_map, 0, 1, "archived")[0]
    other_job = job_ids_on(shard_map, 1, 1, "archived")[0]
    home_run = _insert_run(stores[0], home_job, _at(OLD, 1))
    other_runs = [
        _insert_run(stores[1], other_job, _at(OLD, 2), attempts=2),
        _insert_run(stores[1], other_job, _at(OLDER, 3), state="dead", attempts=3),
    ]
    # A run of the same job still in cluster 0: archived there before its shard moved.
    moved_run = _insert_run(stores[0], other_job, _at(OLDER, 5))
    _insert_run(stores[1], other_job, _at(RECENT, 0))

    assert main(["archive", "--dry-run", "--json"]) == 0
    assert {(r["cluster"], r["day"], r["action"], r["rows"]) for r in _out(capsys)} == {
        (0, OLD.isoformat(), "would_archive", 1),
        (0, OLDER.isoformat(), "would_archive", 1),
        (1, OLD.isoformat(), "would_archive", 1),
        (1, OLDER.isoformat(), "would_archive", 1),
    }
    assert _keys(s3_server, prefix) == []

    assert main(["archive"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["CLUSTER", "DAY", "ACTION", "ROWS", "KEY", "REASON"]
    assert len(text) == 1 + 4 + 2
    assert text[-2].startswith("cluster 0: archived 2 partitions before ")
    assert text[-1].startswith("cluster 1: archived 2 partitions before ")
    for store in stores:
        assert not _partition_exists(store, OLD) and not _partition_exists(store, OLDER)
    assert _partition_exists(stores[1], RECENT)

    # Each cluster under its own prefix: cluster 0 the plain layout, cluster 1 ``cluster-1/``.
    keys = _keys(s3_server, prefix)
    assert len(keys) == 8
    assert len([k for k in keys if k.startswith(f"{prefix}runs/day=")]) == 4
    assert len([k for k in keys if k.startswith(f"{prefix}cluster-1/runs/day=")]) == 4

    # The job of cluster 1: its runs from both prefixes, newest first, the limit after the merge.
    assert main(["runs", "list", "--job", other_job, "--archived", "--json"]) == 0
    found = _out(capsys)
    newest_first = [other_runs[0], moved_run, other_runs[1]]
    assert [r["run_id"] for r in found] == [str(r) for r in newest_first]
    dead = next(r for r in found if r["state"] == "dead")
    assert [a["outcome"] for a in dead["attempts"]] == ["failed", "failed", "succeeded"]
    assert main(["runs", "list", "--job", other_job, "--archived", "--json", "--limit", "2"]) == 0
    assert [r["run_id"] for r in _out(capsys)] == [str(r) for r in newest_first[:2]]

    assert main(["runs", "list", "--job", home_job, "--archived", "--json"]) == 0
    assert [r["run_id"] for r in _out(capsys)] == [str(home_run)]

    # A second run finds nothing left on either cluster.
    assert main(["archive", "--json"]) == 0
    assert _out(capsys) == []


def test_a_cluster_that_does_not_answer_does_not_stop_the_other(
    cluster_urls: tuple[str, str],
    s3_server: S3Server,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gone = f"postgresql://duetime:secret@127.0.0.1:{_closed_port()}/duetime"
    # The cluster that does not answer is the first one (the home cluster): the second is
    # still archived after it.
    shard_map = ShardMap.even([gone, cluster_urls[1]])
    env = {"DUETIME_SHARD_MAP": shard_map.render(), "DUETIME_DATABASE_URL": gone}
    _point_cli(monkeypatch, env, s3_server.env(prefix), tmp_path)
    store = Store(cluster_urls[1], pool_size=1)
    try:
        _insert_run(store, job_ids_on(shard_map, 1, 1)[0], _at(OLD, 1))

        assert main(["archive", "--json"]) == 1
        rows = _out(capsys)
        assert [(r["cluster"], r["day"], r["action"]) for r in rows] == [
            (0, None, "failed"),
            (1, OLD.isoformat(), "archived"),
        ]
        assert "cannot reach PostgreSQL cluster 1 of 2 (shards 0-63)" in rows[0]["reason"]
        assert "secret" not in rows[0]["reason"]
        assert not _partition_exists(store, OLD)
        assert all(k.startswith(f"{prefix}cluster-1/") for k in _keys(s3_server, prefix))

        assert main(["archive"]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert lines[-2].startswith("cluster 0: failed: cannot reach PostgreSQL cluster 1 of 2")
        assert lines[-1].startswith("cluster 1: archived 0 partitions before ")
    finally:
        store.close()
