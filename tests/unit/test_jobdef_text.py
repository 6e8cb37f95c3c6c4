"""Job validation refuses text with a lone surrogate (a JSON file's \\ud800 escape), which has no
UTF-8 form, with its field instead of a traceback, and names the key an expression is written
under: the same field and message for job files, the API and the jobs topic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from duetime.cli.main import main
from duetime.errors import InvalidInput
from duetime.jobdef import parse_job


def _job(**fields: Any) -> dict[str, Any]:
    return {
        "id": "odd",
        "schedule": {"cron": "0 2 * * *"},
        "target": {"http": {"url": "https://example.com/hook"}},
        **fields,
    }


@pytest.mark.parametrize(
    ("job", "field", "reason"),
    [
        (_job(target={"http": {"url": "https://e.com", "body": "\ud800"}}), "http.body", "Unicode"),
        (_job(target={"kafka": {"topic": "t", "value": "\udfff"}}), "kafka.value", "Unicode"),
        (_job(target={"http": {"url": "https://e.com/\ud800"}}), "http.url", "Unicode"),
        (
            _job(target={"http": {"url": "https://e.com", "headers": {"X-A": "\ud800"}}}),
            "http.headers.X-A",
            "Unicode",
        ),
        (
            _job(
                target={
                    "http": {
                        "url": "https://e.com",
                        "headers": {"Authorization": {"secret": "api", "prefix": "\ud800"}},
                    }
                }
            ),
            "http.headers.Authorization.prefix",
            "Unicode",
        ),
    ],
)
def test_text_postgresql_cannot_store_is_a_field_error(
    job: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_job(job)
    assert refused.value.field == f"job.target.{field}"
    assert reason in refused.value.reason


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"cron": "60 * * * *"}, "job.schedule.cron"),
        ({"interval": "P1M"}, "job.schedule.interval"),
        ({"at": "2026-01-01T00:00:00"}, "job.schedule.at"),
        ({"cron": "0 2 * * *", "time_zone": "Mars/Base"}, "job.schedule.time_zone"),
    ],
)
def test_schedule_errors_name_the_key_the_expression_is_under(
    schedule: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_job(_job(schedule=schedule))
    assert refused.value.field == field


def test_a_job_file_with_a_lone_surrogate_is_refused_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.json"
    # json.dumps writes the surrogate as the escape \ud800, as a file may hold it.
    path.write_text(json.dumps(_job(target={"http": {"url": "https://e.com", "body": "\ud800"}})))
    assert main(["jobs", "apply", str(path)]) == 2
    assert "job.target.http.body: is not valid Unicode" in capsys.readouterr().err
