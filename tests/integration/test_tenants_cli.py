"""``duetime tenants set|list`` and the job quota on ``duetime jobs apply``, on a real database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from duetime.cli.main import main

pytestmark = pytest.mark.integration


def _file(tmp_path: Path, tenant: str, ids: list[str], hour: int = 0) -> Path:
    path = tmp_path / f"{tenant}-{len(ids)}-{hour}.json"
    jobs = [
        {
            "id": job_id,
            "tenant": tenant,
            "schedule": {"cron": f"0 {hour} * * *"},
            "target": {"http": {"url": "https://example.com/hook"}},
        }
        for job_id in ids
    ]
    path.write_text(json.dumps({"jobs": jobs}))
    return path


def _listed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["tenants", "list", "--json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


def test_set_change_and_list(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tenants", "set", "acme", "--weight", "3", "--max-jobs", "100"]) == 0
    assert capsys.readouterr().out == "tenant acme: weight=3 max_jobs=100 jobs=0\n"
    # Only the options given change.
    assert main(["tenants", "set", "acme", "--max-jobs", "10"]) == 0
    assert capsys.readouterr().out == "tenant acme: weight=3 max_jobs=10 jobs=0\n"
    assert main(["tenants", "set", "initech", "--weight", "7"]) == 0
    # A tenant with jobs and no row is listed with weight 1 and no quota.
    assert main(["jobs", "apply", str(_file(tmp_path, "globex", ["g1", "g2"]))]) == 0
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a1"]))]) == 0
    assert _listed(capsys) == [
        {"tenant": "acme", "weight": 3, "max_jobs": 10, "jobs": 1},
        {"tenant": "globex", "weight": 1, "max_jobs": None, "jobs": 2},
        {"tenant": "initech", "weight": 7, "max_jobs": None, "jobs": 0},
    ]
    assert main(["tenants", "set", "acme", "--max-jobs", "none"]) == 0
    assert capsys.readouterr().out == "tenant acme: weight=3 max_jobs=none jobs=1\n"
    assert main(["tenants", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["TENANT", "WEIGHT", "MAX_JOBS", "JOBS"]
    assert table[1].split() == ["acme", "3", "1"]  # no quota: an empty cell


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tenants", "set", "acme"], "options: give at least one of --weight, --max-jobs"),
        (["tenants", "set", "Acme", "--weight", "2"], "name: use 1-63 characters from a-z"),
        (["tenants", "set", "_acme", "--weight", "2"], "(first: letter or digit)"),
        (["tenants", "set", "a" * 64, "--weight", "2"], "name: use 1-63 characters"),
        (["tenants", "set", "acme", "--weight", "0"], "--weight: must be a whole number from 1"),
        (["tenants", "set", "acme", "--weight", "1001"], "from 1 to 1000, not '1001'"),
        (["tenants", "set", "acme", "--weight", "2.5"], "--weight: must be a whole number"),
        (["tenants", "set", "acme", "--max-jobs", "0"], "--max-jobs: must be a whole number"),
        (["tenants", "set", "acme", "--max-jobs", "-5"], "--max-jobs: must be a whole number"),
        (["tenants", "set", "acme", "--max-jobs", "None"], "not 'None'"),
        (["tenants", "set", "acme", "--max-jobs", "1e3"], "or none to remove the quota"),
        (["tenants", "set", "acme", "--max-jobs", "2147483648"], "from 1 to 2147483647"),
    ],
)
def test_bad_input_is_a_clear_error_and_changes_nothing(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["tenants", "set", "acme", "--weight", "2", "--max-jobs", "5"]) == 0
    before = _listed(capsys)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert _listed(capsys) == before


def test_a_file_over_the_quota_is_refused_whole_and_updates_pass_at_the_quota(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tenants", "set", "acme", "--max-jobs", "3"]) == 0
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a1", "a2"]))]) == 0
    capsys.readouterr()
    # Two of the three new acme jobs would fit; the file is refused as a whole.
    over = _file(tmp_path, "acme", ["a1", "a3", "a4", "a5"])
    assert main(["jobs", "apply", str(over)]) == 2
    assert capsys.readouterr().err == (
        "duetime: error: jobs[2].tenant: job file refused: tenant acme may have at most 3 jobs; "
        "it has 2 and this file adds 3\n"
    )
    assert _listed(capsys) == [{"tenant": "acme", "weight": 1, "max_jobs": 3, "jobs": 2}]
    assert main(["jobs", "list", "--json"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert [(j["job_id"], j["version"]) for j in stored] == [("a1", 1), ("a2", 1)]
    # Up to the quota, then updates of the full tenant's jobs.
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a3"]))]) == 0
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a1", "a2", "a3"], 5))]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "a3: created (version 1)",
        "a1: updated (version 2)",
        "a2: updated (version 2)",
        "a3: updated (version 2)",
    ]
    # Moving a job in counts for the new tenant: acme is full.
    assert main(["jobs", "apply", str(_file(tmp_path, "globex", ["g1"]))]) == 0
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["g1"]))]) == 2
    assert "tenant acme may have at most 3 jobs; it has 3 and this file adds 1" in (
        capsys.readouterr().err
    )
    # A lowered quota leaves the tenant above it: it says so, and updates and deletes still pass.
    assert main(["tenants", "set", "acme", "--max-jobs", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "tenant acme: weight=1 max_jobs=1 jobs=3",
        "tenant acme has 3 jobs, more than max_jobs 1: it can change and delete its jobs, "
        "and add none until it is below",
    ]
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a1"], 7))]) == 0
    assert main(["jobs", "delete", "a2"]) == 0
    assert main(["jobs", "apply", str(_file(tmp_path, "acme", ["a9"]))]) == 2
    assert _listed(capsys) == [
        {"tenant": "acme", "weight": 1, "max_jobs": 1, "jobs": 2},
        {"tenant": "globex", "weight": 1, "max_jobs": None, "jobs": 1},
    ]
