"""The CLI on two PostgreSQL clusters (DUETIME_SHARD_MAP): ``jobs apply`` writes each job to its
shard's cluster, pause/delete find it there, ``jobs list`` / ``runs list`` merge both clusters in
one cluster's order with the limit applied after the merge, ``shards`` reads each shard's fence
in its own cluster, and a cluster that does not answer is named in one line."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from duetime.cli.main import main
from duetime.model import run_id_for
from duetime.shard_map import ShardMap
from duetime.store import NewRun, Store

from .test_clusters_api import ids_on

pytestmark = pytest.mark.integration


@pytest.fixture
def stores(
    shard_map_env: dict[str, str],
    cluster_urls: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Any:
    for key, value in shard_map_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    opened = [Store(url, pool_size=1) for url in cluster_urls]
    yield opened
    for store in opened:
        store.close()


def _job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "schedule": {"cron": "*/5 * * * *", "time_zone": "Europe/London"},
        "target": {"http": {"url": "https://example.com/hook"}},
    }


def _apply(tmp_path: Path, job_ids: list[str]) -> int:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [_job(j) for j in job_ids]}))
    return main(["jobs", "apply", str(path)])


def _job_ids(store: Store) -> set[str]:
    return {r.job_id for r in store.jobs_list()}


def _out(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_jobs_apply_lands_each_job_in_its_cluster_and_lists_merge(
    stores: list[Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = ids_on(0, 3), ids_on(1, 3)
    assert _apply(tmp_path, [*second, *first]) == 0
    capsys.readouterr()
    assert _job_ids(stores[0]) == set(first) and _job_ids(stores[1]) == set(second)

    assert main(["jobs", "list", "--json"]) == 0
    assert [j["job_id"] for j in _out(capsys)] == sorted(first + second)
    assert main(["jobs", "list", "--json", "--limit", "4"]) == 0
    assert [j["job_id"] for j in _out(capsys)] == sorted(first + second)[:4]

    assert main(["jobs", "pause", second[0]]) == 0
    assert capsys.readouterr().out.strip() == f"{second[0]}: paused"
    assert main(["jobs", "delete", second[1]]) == 0
    assert _job_ids(stores[1]) == {second[0], second[2]}
    assert main(["jobs", "delete", second[1]]) == 3  # gone: not found on its cluster


def _runs(store: Store, job_id: str, times: list[datetime]) -> None:
    with store.tx() as tx:
        for day in {t.date() for t in times}:
            tx.runs_ensure_partition(day)
        tx.runs_insert(
            [NewRun(run_id_for(job_id, t), job_id, "default", "svc", t, t, 3) for t in times]
        )


def test_runs_list_merges_both_clusters_newest_first(
    stores: list[Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = ids_on(0, 1)[0], ids_on(1, 1)[0]
    assert _apply(tmp_path, [a, b]) == 0
    capsys.readouterr()
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    times = [base + timedelta(minutes=5 * n) for n in range(3)]
    _runs(stores[0], a, times)
    _runs(stores[1], b, times)

    assert main(["runs", "list", "--json"]) == 0
    listed = [(r["scheduled_for"], r["job_id"]) for r in _out(capsys)]
    stamps = [t.isoformat().replace("+00:00", "Z") for t in reversed(times)]
    assert listed == [(s, j) for s in stamps for j in sorted([a, b])]
    assert main(["runs", "list", "--json", "--limit", "3"]) == 0
    assert [(r["scheduled_for"], r["job_id"]) for r in _out(capsys)] == listed[:3]
    assert main(["runs", "list", "--job", b, "--json"]) == 0
    assert {r["job_id"] for r in _out(capsys)} == {b}

    # The ledger is read in the job's cluster (another cluster would answer "no job").
    assert main(["runs", "list", "--job", b, "--all-occurrences", "--json"]) == 0
    assert "upcoming" in {line["status"] for line in _out(capsys)}


def test_shards_reads_each_fence_in_the_shards_cluster(
    stores: list[Store], capsys: pytest.CaptureFixture[str]
) -> None:
    with stores[0].tx() as tx:
        tx.shards_claim("planner-a", {3: 11, 70: 99})  # 70 is not the home cluster's shard
    with stores[1].tx() as tx:
        tx.shards_claim("planner-b", {70: 12})
    assert main(["shards", "--json"]) == 0
    rows = {r["shard"]: r for r in _out(capsys)}
    assert (rows[3]["fence_owner"], rows[3]["fence_token"]) == ("planner-a", 11)
    assert (rows[70]["fence_owner"], rows[70]["fence_token"]) == ("planner-b", 12)
    assert rows[71]["fence_owner"] is None


def test_a_cluster_that_does_not_answer_is_named(
    cluster_urls: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = f"postgresql+psycopg://duetime@127.0.0.1:{port}/duetime"
    monkeypatch.setenv("DUETIME_SHARD_MAP", ShardMap.even([cluster_urls[0], down]).render())
    monkeypatch.delenv("DUETIME_DATABASE_URL", raising=False)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    assert main(["jobs", "list"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"cluster 2 of 2 (shards 64-127) at 127.0.0.1:{port}" in err
    assert "DUETIME_SHARD_MAP from the environment" in err
