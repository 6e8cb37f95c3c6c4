"""``duetime alerts list`` over a real database, and ``duetime alerts key``."""

from __future__ import annotations

import json

import pytest

from duetime.alerts import AlertKind, NewAlert, tenant_secret
from duetime.cli.main import main
from duetime.store import Store
from duetime.store.alerts import alerts_enqueue

pytestmark = pytest.mark.integration


def test_list_shows_alerts_newest_first(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(cli_env, pool_size=1)
    with store.tx() as tx:
        alerts_enqueue(
            tx,
            [
                NewAlert(AlertKind.RUN_DEAD, "r-1", "firing", "run r-1 is dead", "acme"),
                NewAlert(
                    AlertKind.OUTBOX_BACKLOG, "1.firing", "firing", "backlog", None, {"runs": 120}
                ),
            ],
        )
    store.close()
    assert main(["alerts", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["subject"], r["state"], r["status"]) for r in rows] == [
        ("outbox.backlog", "1.firing", "pending", "firing"),
        ("run.dead", "r-1", "pending", "firing"),
    ]
    assert rows[0]["details"] == {"runs": 120} and rows[1]["tenant"] == "acme"
    assert main(["alerts", "list", "--state", "delivered", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["alerts", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["ALERT_ID", "KIND", "SUBJECT"] and len(table) == 3


def test_key_prints_the_tenant_key_derived_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DUETIME_ALERT_SECRET", raising=False)
    assert main(["alerts", "key", "--tenant", "acme"]) == 1
    assert "DUETIME_ALERT_SECRET" in capsys.readouterr().err
    monkeypatch.setenv("DUETIME_ALERT_SECRET", "op-secret")
    assert main(["alerts", "key", "--tenant", "acme"]) == 0
    assert capsys.readouterr().out.strip() == tenant_secret("op-secret", "acme")
    assert main(["alerts", "key", "--tenant", "../etc"]) == 2
    assert "--tenant" in capsys.readouterr().err
