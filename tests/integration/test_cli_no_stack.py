"""Every client command without a reachable stack says so in one line: where it looked, how to
start the stack; exit code 1, nothing on stdout, no driver traceback or multi-line message.

Run as real processes, so that what librdkafka or libpq would write to the terminal counts too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SINCE = "2026-01-01T00:00:00Z"
DATABASE_COMMANDS = [
    ["jobs", "list"],
    ["jobs", "pause", "some-job"],
    ["jobs", "delete", "some-job"],
    ["runs", "list"],
    ["targets", "list"],
    ["tenants", "list"],
    ["alerts", "list"],
    ["tokens", "list"],
    ["migrate"],
    ["reemit", "--from", SINCE, "--to", "2026-01-02T00:00:00Z"],
    ["archive", "--dry-run"],
]
BROKER_COMMANDS = [["replay", "--topic", "runs.ready", "--since", SINCE]]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens on it once the socket is closed


def _duetime(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    return subprocess.run(
        [sys.executable, "-m", "duetime.cli.main", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("duetime: ")
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("command", DATABASE_COMMANDS + BROKER_COMMANDS, ids=" ".join)
def test_nothing_configured_names_the_data_dir_and_how_to_start(
    command: list[str], tmp_path: Path
) -> None:
    line = _one_line(_duetime(command, tmp_path, {}))
    where = tmp_path / ".duetime" / "stack.env"
    assert f"{where} does not exist" in line
    assert "`duetime up`" in line


@pytest.mark.parametrize("command", DATABASE_COMMANDS, ids=" ".join)
def test_a_stopped_stack_names_the_database_it_tried(command: list[str], tmp_path: Path) -> None:
    port = _closed_port()
    data = tmp_path / "data"
    data.mkdir()
    (data / "stack.env").write_text(
        f"DUETIME_DATABASE_URL=postgresql://duetime:secret@127.0.0.1:{port}/duetime\n"
        f"DUETIME_KAFKA_BOOTSTRAP=127.0.0.1:{_closed_port()}\n"
    )
    line = _one_line(_duetime(command, tmp_path, {"DUETIME_DATA_DIR": str(data)}))
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}" in line
    assert f"DUETIME_DATABASE_URL from {data / 'stack.env'}" in line
    assert "connection refused" in line
    assert "the stack there is not running: start it with `duetime up`" in line
    assert "secret" not in line


def test_archived_runs_without_object_storage_say_where_they_looked(tmp_path: Path) -> None:
    line = _one_line(_duetime(["runs", "list", "--job", "j", "--archived"], tmp_path, {}))
    assert f"{tmp_path / '.duetime' / 'stack.env'} does not exist" in line
    assert "`duetime up`" in line and "DUETIME_S3_BUCKET" in line


def test_a_broker_that_does_not_answer_is_one_line_too(tmp_path: Path) -> None:
    port = _closed_port()
    env = {"DUETIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"}
    line = _one_line(_duetime(BROKER_COMMANDS[0], tmp_path, env))
    assert line == (
        f"duetime: cannot reach the broker at 127.0.0.1:{port} (DUETIME_KAFKA_BOOTSTRAP from the "
        "environment): connection refused; start it, or point DUETIME_KAFKA_BOOTSTRAP at a "
        "running one"
    )
