"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The CLI pointed at this test's database, and at a data dir without a running stack."""
    monkeypatch.setenv("DUETIME_DATABASE_URL", database_url)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    return database_url
