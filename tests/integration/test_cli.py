"""The CLI against a real database: jobs apply (all-or-nothing), jobs list, runs list, migrate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from duetime.cli.main import main
from duetime.model import run_id_for
from duetime.store import NewRun, Store

pytestmark = pytest.mark.integration


def _write(tmp_path: Path, jobs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    return path


def _job(job_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "schedule": {"cron": "*/5 * * * *", "time_zone": "America/New_York"},
        "target": {"http": {"url": "https://example.com/hook"}},
        **extra,
    }


def test_invalid_file_is_refused_and_nothing_is_stored(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        [_job("good"), _job("bad", schedule={"cron": "0 0 * * *", "time_zone": "Mars/Base"})],
    )
    assert main(["jobs", "apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert "jobs[1].schedule.time_zone" in err and len(err.strip().splitlines()) == 1
    assert main(["jobs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_an_unparsable_url_ends_apply_with_exit_code_2_and_one_line(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``http://[::1`` makes urllib raise ValueError: reported as the field's error, no
    traceback (main returns instead of raising), nothing stored."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - id: good\n"
        "    schedule: {cron: '*/5 * * * *'}\n"
        "    target: {http: {url: 'https://example.com/hook'}}\n"
        "  - id: broken\n"
        "    schedule: {cron: '*/5 * * * *'}\n"
        "    target: {http: {url: 'http://[::1'}}\n"
    )
    assert main(["jobs", "apply", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "duetime: error: jobs[1].target.http.url: is not a valid URL: Invalid IPv6 URL"
    ]
    assert main(["jobs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_apply_list_and_reapply(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, [_job("a"), _job("b", tenant="team-b")])
    assert main(["jobs", "apply", str(path), "--json"]) == 0
    assert [r["action"] for r in json.loads(capsys.readouterr().out)] == ["created", "created"]
    assert main(["jobs", "apply", str(path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [(r["action"], r["version"]) for r in again] == [("updated", 2), ("updated", 2)]
    assert main(["jobs", "list", "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in jobs] == ["a", "b"]
    assert jobs[0]["time_zone"] == "America/New_York"
    assert jobs[0]["next_run_at"].endswith("Z")


def test_runs_list_json_fields(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(cli_env, pool_size=1)
    scheduled_for = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    with store.tx() as tx:
        tx.runs_ensure_partition(scheduled_for.date())
        tx.runs_insert(
            [
                NewRun(
                    run_id_for("j", scheduled_for), "j", "t", "svc", scheduled_for, scheduled_for, 3
                )
            ]
        )
    store.close()
    assert main(["runs", "list", "--job", "j", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    for key in (
        "run_id",
        "job_id",
        "scheduled_for",
        "due_at",
        "state",
        "attempt",
        "started_at",
        "finished_at",
    ):
        assert key in run
    assert run["scheduled_for"] == "2026-12-03T12:00:00Z" and run["state"] == "scheduled"
    assert main(["runs", "list", "--job", "other", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_migrate_is_idempotent(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_missing_database_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DUETIME_DATABASE_URL", raising=False)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path))
    assert main(["jobs", "list"]) == 1
    assert "no database" in capsys.readouterr().err


def test_pause_resume_delete(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, [_job("p", schedule={"interval": "PT10S"})])
    assert main(["jobs", "apply", str(path)]) == 0
    assert main(["jobs", "pause", "p"]) == 0
    assert main(["jobs", "pause", "p"]) == 0
    capsys.readouterr()
    assert main(["jobs", "list", "--json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)
    assert job["paused"] is True and job["version"] == 2
    assert main(["jobs", "resume", "p"]) == 0
    assert capsys.readouterr().out.strip() == "p: resumed"
    assert main(["jobs", "list", "--json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)
    assert job["paused"] is False and job["version"] == 3
    assert job["next_run_at"] > datetime.now(UTC).isoformat().replace("+00:00", "Z")
    assert main(["jobs", "delete", "p"]) == 0
    assert main(["jobs", "delete", "p"]) == 3
    assert main(["jobs", "resume", "nope"]) == 3
    assert "no job 'nope'" in capsys.readouterr().err
