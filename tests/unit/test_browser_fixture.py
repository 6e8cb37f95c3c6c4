"""Finding the browser tests' Chromium: the configured binary, else chromium on PATH, else a
failure that says how to install one (never a skip)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.browser import chromium_executable


def test_no_chromium_fails_and_says_how(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DUETIME_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"make browser.*apt-get install -y chromium"):
        chromium_executable()


def test_chromium_on_path_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DUETIME_CHROMIUM", raising=False)
    binary = tmp_path / "chromium"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium_executable() == str(binary)


def test_the_configured_binary_wins_and_must_be_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = tmp_path / "chrome"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setenv("DUETIME_CHROMIUM", str(binary))
    with pytest.raises(pytest.fail.Exception, match="not an executable file"):
        chromium_executable()
    binary.chmod(0o755)
    assert chromium_executable() == str(binary)
