"""Job-definition files: valid ones parse; every bad one is refused with the field named."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from duetime.errors import InvalidInput, JobDefinitionError
from duetime.jobdef import load_job_file, parse_job, parse_jobs
from duetime.model import HttpTarget, KafkaTarget


def _job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": "report-daily",
        "schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
        "target": {"http": {"url": "https://reports.example.com/run"}},
    }
    job.update(overrides)
    return job


def test_minimal_job_gets_documented_defaults() -> None:
    job = parse_job(_job())
    assert job.tenant == "default"
    assert job.target_service == "reports.example.com"
    assert job.catch_up == "once" and job.overlap == "allow"
    assert job.lease == timedelta(seconds=60) and job.heartbeat_interval == timedelta(seconds=20)
    assert job.retry.max_attempts == 3
    assert job.version == 0  # resolved to stored + 1 when written
    assert isinstance(job.target, HttpTarget) and job.target.method == "POST"


def test_kafka_target_and_object_body() -> None:
    job = parse_job(_job(target={"kafka": {"topic": "billing.tick", "value": {"a": 1}}}))
    assert job.target == KafkaTarget(topic="billing.tick", value='{"a":1}')
    assert job.target_service == "kafka:billing.tick"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"schedule": {"cron": "61 * * * *"}}, "job.schedule"),
        ({"schedule": {"cron": "0 0 * * *", "time_zone": "Mars/Base"}}, "job.schedule.time_zone"),
        ({"schedule": {"cron": "0 0 * * *", "interval": "PT5S"}}, "job.schedule"),
        ({"schedule": {"cron": "0 0 * * *", "dst_gap": "later"}}, "job.schedule.dst_gap"),
        ({"id": "has space"}, "job.id"),
        ({"id": ""}, "job.id"),
        ({"tenant": "Team A"}, "job.tenant"),
        ({"target": {"http": {"url": "ftp://x.example"}}}, "job.target.http.url"),
        ({"target": {"http": {"url": "https://u:p@x.example"}}}, "job.target.http.url"),
        (
            {"target": {"http": {"url": "https://x.example", "headers": {"Host": "y"}}}},
            "job.target.http.headers.Host",
        ),
        (
            {"target": {"http": {"url": "https://x.example", "headers": {"X-A": "a\r\nB: c"}}}},
            "job.target.http.headers.X-A",
        ),
        (
            {"target": {"http": {"url": "https://x.example", "body": "x" * 300_000}}},
            "job.target.http.body",
        ),
        ({"target": {"kafka": {"topic": "../etc", "value": "v"}}}, "job.target.kafka.topic"),
        ({"target": {}}, "job.target"),
        ({"catch_up": "sometimes"}, "job.catch_up"),
        ({"retry": {"max_attempts": 0}}, "job.retry.max_attempts"),
        ({"lease_seconds": 10, "heartbeat_seconds": 10}, "job.heartbeat_seconds"),
        ({"colour": "blue"}, "job.colour"),
    ],
)
def test_bad_definitions_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        parse_job(_job(**overrides))
    assert info.value.field.startswith(field), info.value


def test_file_with_one_bad_job_is_refused_as_a_whole(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [_job(), _job(id="b", schedule={"cron": "x"})]}))
    with pytest.raises(JobDefinitionError) as info:
        load_job_file(path)
    assert info.value.field.startswith("jobs[1].schedule")


def test_duplicate_ids_refused() -> None:
    with pytest.raises(JobDefinitionError, match="appears twice"):
        parse_jobs([_job(), _job()])


def test_yaml_and_unparsable_files(tmp_path: Path) -> None:
    good = tmp_path / "jobs.yaml"
    good.write_text(
        "jobs:\n  - id: a\n    schedule: {interval: PT5S}\n"
        "    target: {http: {url: 'https://a.example'}}\n"
    )
    assert [j.job_id for j in load_job_file(good)] == ["a"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [unclosed\n")
    with pytest.raises(InvalidInput, match="not valid"):
        load_job_file(bad)


_HTTP = {"http": {"url": "https://example.com/hook"}}


def test_schedules_parsed_once_per_content_still_fail_every_time() -> None:
    """Many jobs share a schedule object's content: the parsed spec is reused, an invalid
    schedule is refused for every job that carries it, with that job's field path."""
    first = parse_job({"id": "a", "schedule": {"cron": "0 0 * * *"}, "target": _HTTP})
    second = parse_job({"id": "b", "schedule": {"cron": "0 0 * * *"}, "target": _HTTP})
    other = parse_job(
        {"id": "c", "schedule": {"cron": "0 0 * * *", "time_zone": "Asia/Tokyo"}, "target": _HTTP}
    )
    assert first.schedule is second.schedule
    assert other.schedule.time_zone == "Asia/Tokyo"
    for field in ("jobs[0]", "jobs[1]"):
        with pytest.raises(JobDefinitionError) as raised:
            parse_job({"id": "d", "schedule": {"cron": "61 * * * *"}, "target": _HTTP}, field)
        assert raised.value.field.startswith(f"{field}.schedule")
    unhashable = {"id": "e", "schedule": {"cron": ["0 0 * * *"]}, "target": _HTTP}
    with pytest.raises(JobDefinitionError, match="non-empty string"):
        parse_job(unhashable)
