"""``duetime shards``: the fence rows beside etcd's owners; without etcd, SKIP LOCKED mode."""

from __future__ import annotations

import json
import uuid

import pytest

from duetime.cli.main import main
from duetime.store import Store
from duetime_infra import StackUrls

pytestmark = pytest.mark.integration


def _claim(database_url: str, owner: str, tokens: dict[int, int]) -> None:
    store = Store(database_url, pool_size=1)
    try:
        with store.tx() as tx:
            tx.shards_claim(owner, tokens)
            tx.shards_fence("stale", {s: t - 1 for s, t in tokens.items()})
    finally:
        store.close()


def test_without_etcd_the_fence_rows_are_shown_and_the_mode_said(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _claim(cli_env, "p1", {3: 40})
    assert main(["shards"]) == 0
    out = capsys.readouterr().out
    assert "SKIP LOCKED mode" in out
    line = next(x for x in out.splitlines() if x.split()[:1] == ["3"])
    assert line.split()[:4] == ["3", "40", "p1", "1"]
    assert main(["shards", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 128
    assert rows[3] | {"claimed_at": None} == {
        "shard": 3,
        "owner": None,
        "token": None,
        "fence_token": 40,
        "fence_owner": "p1",
        "rejected": 1,
        "claimed_at": None,
    }
    assert rows[4]["fence_token"] is None and rows[4]["rejected"] == 0


def test_with_etcd_an_empty_cluster_shows_every_shard_without_owner(
    cli_env: str,
    stack: StackUrls,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DUETIME_ETCD_ENDPOINTS", stack.etcd_endpoints)
    monkeypatch.setenv("DUETIME_TOPIC_PREFIX", f"t{uuid.uuid4().hex[:8]}.")
    assert main(["shards"]) == 0
    assert "members: none; shards without an owner: 128" in capsys.readouterr().out
