"""Job-definition files: valid ones parse; every bad one is refused with the field named."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from duetime.bus.records import JOB_DEFINITIONS
from duetime.errors import InvalidInput, JobDefinitionError
from duetime.jobdef import load_job_file, parse_job, parse_jobs, validate_job
from duetime.model import HttpTarget, KafkaTarget, SecretRef


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
        ({"paused": "false"}, "job.paused"),
        ({"paused": 0}, "job.paused"),
        ({"target": {"http": {"url": "http://[::1"}}}, "job.target.http.url"),
        ({"target": {"http": {"url": "https://x.example:99999/"}}}, "job.target.http.url"),
    ],
)
def test_bad_definitions_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        parse_job(_job(**overrides))
    assert info.value.field.startswith(field), info.value


def test_paused_takes_a_boolean_only() -> None:
    assert parse_job(_job(paused=True)).paused and not parse_job(_job(paused=False)).paused


def test_bounds_hold_for_a_job_built_elsewhere_too() -> None:
    """validate_job, which the jobs topic and the API use, checks what a file's parse checks."""
    job = parse_job(_job())
    with pytest.raises(JobDefinitionError) as info:
        validate_job(replace(job, max_catch_up=2**31))
    assert info.value.field == "job.max_catch_up"
    assert info.value.reason == "must be between 1 and 10000, not 2.14748e+09"
    with pytest.raises(JobDefinitionError) as info:
        validate_job(replace(job, window=timedelta(days=2)))
    assert info.value.field == "job.window_seconds"
    with pytest.raises(JobDefinitionError) as info:
        validate_job(replace(job, retry=replace(job.retry, multiplier=50.0)))
    assert info.value.field == "job.retry.multiplier"


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


# --- secret header values: references accepted, literal credentials refused -------------------
def _with_headers(headers: Any) -> dict[str, Any]:
    return _job(target={"http": {"url": "https://billing.example.com/run", "headers": headers}})


def test_a_header_may_name_a_secret_instead_of_holding_it() -> None:
    job = parse_job(
        _with_headers(
            {
                "Authorization": {"secret": "billing-api-token", "prefix": "Bearer "},
                "X-Api-Key": {"secret": "billing.key_2"},
                "X-Team": "billing",
            }
        )
    )
    assert isinstance(job.target, HttpTarget)
    assert job.target.headers == (
        ("Authorization", SecretRef(name="billing-api-token", prefix="Bearer ")),
        ("X-Api-Key", SecretRef(name="billing.key_2")),
        ("X-Team", "billing"),
    )


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "authorization",
        "Proxy-Authorization",
        "X-Authorization",
        "Cookie",
        "X-Api-Key",
        "Api-Key",
        "apikey",
        "X-Auth-Token",
        "X-Vault-Token",
        "X-Client-Secret",
        "X-Db-Password",
        "X-Credentials",
    ],
)
def test_a_literal_credential_is_refused_and_the_error_shows_the_way(name: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        parse_job(_with_headers({name: "Bearer s3cr3t-value"}))
    assert info.value.field == f"job.target.http.headers.{name}"
    if name.lower() != "proxy-authorization":  # a hop-by-hop header duetime never passes on
        assert '{"secret": "' in info.value.reason
        assert "docs/targets.md" in info.value.reason
    assert "s3cr3t-value" not in str(info.value)


def test_a_file_with_one_literal_credential_is_refused_as_a_whole(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    good = _job(id="a")
    bad = _job(id="b")
    bad["target"]["http"]["headers"] = {"Authorization": "Basic dXNlcjpwYXNz"}
    path.write_text(json.dumps({"jobs": [good, bad]}))
    with pytest.raises(JobDefinitionError) as info:
        load_job_file(path)
    assert info.value.field == "jobs[1].target.http.headers.Authorization"
    assert "dXNlcjpwYXNz" not in str(info.value)


@pytest.mark.parametrize(
    "header",
    ["X-Team", "X-Routing-Key", "Content-Type", "Accept", "X-Request-Source", "X-Author-Name"],
)
def test_ordinary_headers_stay_literal(header: str) -> None:
    job = parse_job(_with_headers({header: "some value"}))
    assert isinstance(job.target, HttpTarget)
    assert job.target.headers == ((header, "some value"),)


@pytest.mark.parametrize(
    ("value", "field", "reason"),
    [
        ({"secret": "../etc/passwd"}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": ".hidden"}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": "a/b"}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": "has space"}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": "x" * 129}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": ""}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": "tok\x00en"}, "Authorization.secret", "use 1-128 characters"),
        ({"secret": 42}, "Authorization.secret", "must be a string"),
        ({"prefix": "Bearer "}, "Authorization.secret", "is missing"),
        ({"secret": "tok", "value": "x"}, "Authorization.value", "not a secret reference field"),
        ({"secret": "tok", "prefix": "Bearer\r\nX-Evil: 1 "}, "Authorization.prefix", "CR, LF"),
        ({"secret": "tok", "prefix": 7}, "Authorization.prefix", "must be a string"),
        ({"secret": "tok", "prefix": "p" * 257}, "Authorization.prefix", "longer than 256"),
        (["tok"], "Authorization", "must be a string or a secret reference"),
        (12345, "Authorization", "must be a string or a secret reference"),
    ],
)
def test_bad_secret_references_name_the_field(value: Any, field: str, reason: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        parse_job(_with_headers({"Authorization": value}))
    assert info.value.field == f"job.target.http.headers.{field}"
    assert reason in info.value.reason


def test_the_example_file_parses_and_names_its_credential() -> None:
    jobs = load_job_file(Path(__file__).parents[2] / "examples" / "jobs.yaml")
    billing = next(j for j in jobs if j.job_id == "billing-close-ist")
    assert isinstance(billing.target, HttpTarget)
    assert ("Authorization", SecretRef("billing-api-token", "Bearer ")) in billing.target.headers


OWN_TOPICS = ["jobs", "jobs.rejected", "runs.ready", "runs.due.0s", "runs.dead", "__consumers"]


@pytest.mark.parametrize("topic", OWN_TOPICS)
def test_a_kafka_target_on_duetimes_own_topic_names_is_refused_on_every_path(topic: str) -> None:
    """With an empty topic prefix these are duetime's own topics; validation knows no prefix,
    so it refuses them always: a job file (and the API, which parses the same way) and a record
    on the jobs topic alike."""
    data = _job(target={"kafka": {"topic": topic, "value": "{}"}})
    with pytest.raises(JobDefinitionError) as from_file:
        parse_jobs({"jobs": [data]})
    assert from_file.value.field == "jobs[0].target.kafka.topic"
    assert "is reserved" in from_file.value.reason
    valid = parse_job(_job(target={"kafka": {"topic": "billing.tick", "value": "{}"}}))
    record = replace(valid, target=KafkaTarget(topic=topic, key=None, value="{}"), version=1)
    with pytest.raises(InvalidInput) as from_topic:
        JOB_DEFINITIONS.decode(JOB_DEFINITIONS.encode(record), JOB_DEFINITIONS.headers())
    assert from_topic.value.field == "job.target.kafka.topic"


@pytest.mark.parametrize("topic", ["jobs-of-the-day", "myjobs", "runs", "billing.runs.daily"])
def test_names_that_only_look_like_duetimes_are_allowed(topic: str) -> None:
    job = parse_job(_job(target={"kafka": {"topic": topic, "value": "{}"}}))
    assert isinstance(job.target, KafkaTarget) and job.target.topic == topic
