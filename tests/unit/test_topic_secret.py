"""``duetime up``'s jobs-topic guard secret: made once per data dir (mode 0600), kept across
restarts, an operator's own secret in the environment never replaced, and
``duetime tokens topic-key`` derives a tenant's key from the data dir's when the environment has
none."""

from __future__ import annotations

from pathlib import Path

import pytest

from duetime.cli.topic_secret import TOPIC_SECRET_FILE, ensure_topic_secret, topic_secret
from duetime.jobs_guard import SECRET_ENV, tenant_key


def test_a_secret_is_made_once_per_data_dir_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert topic_secret({}, data_dir) == ""
    secret = ensure_topic_secret({}, data_dir)
    path = data_dir / TOPIC_SECRET_FILE
    assert len(secret) == 64 and path.read_text() == secret + "\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_topic_secret({}, data_dir) == secret  # a restart keeps the tenants' keys
    assert ensure_topic_secret({}, tmp_path / "other") != secret


def test_the_environments_secret_wins_and_no_file_is_made(tmp_path: Path) -> None:
    assert ensure_topic_secret({SECRET_ENV: "operator"}, tmp_path) == "operator"
    assert not (tmp_path / TOPIC_SECRET_FILE).exists()
    ensure_topic_secret({}, tmp_path)
    assert topic_secret({SECRET_ENV: "operator"}, tmp_path) == "operator"


def test_topic_key_reads_the_data_dirs_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from duetime.cli.main import main

    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path))
    assert main(["tokens", "topic-key", "--tenant", "acme"]) == 1
    assert f"{SECRET_ENV} is not set" in capsys.readouterr().err
    secret = ensure_topic_secret({}, tmp_path)
    assert main(["tokens", "topic-key", "--tenant", "acme"]) == 0
    assert capsys.readouterr().out == tenant_key(secret, "acme") + "\n"
