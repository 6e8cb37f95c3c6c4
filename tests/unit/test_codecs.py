"""Every topic's Avro codec round-trips, carries its fingerprint, and refuses bad bytes clearly."""

from __future__ import annotations

import contextlib
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from duetime.bus.codec import SCHEMA_HEADER
from duetime.bus.records import (
    JOB_DEFINITIONS,
    JOB_REJECTIONS,
    RUN_DEAD,
    RUN_EVENTS,
    RUN_HEARTBEATS,
    RUN_RESULTS,
)
from duetime.errors import CodecError, InvalidInput, JobDefinitionError
from duetime.events import JobRejected, JobTombstone, RunDead, RunHeartbeat, RunResult
from duetime.jobdef import parse_job
from duetime.model import HttpTarget, JobDefinition, KafkaTarget, RunEvent, SecretRef, run_id_for
from duetime.store.rows import target_from_json, target_to_json

T0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def _job() -> object:
    return parse_job(
        {
            "id": "billing-daily",
            "tenant": "billing",
            "version": 7,
            "schedule": {
                "cron": "0 9 * * MON-FRI",
                "time_zone": "Europe/Berlin",
                "dst_gap": "skip",
            },
            "window_seconds": 30,
            "catch_up": "all",
            "max_catch_up": 5,
            "target": {
                "http": {
                    "url": "https://billing.example.com/run",
                    "headers": {"X-Team": "billing"},
                    "body": {"a": 1},
                    "timeout_seconds": 12,
                }
            },
            "retry": {"max_attempts": 5, "initial_interval_seconds": 2},
            "lease_seconds": 30,
            "heartbeat_seconds": 10,
        }
    )


def _run(target: object) -> RunEvent:
    return RunEvent(
        run_id=run_id_for("j", T0),
        job_id="j",
        tenant="t",
        scheduled_for=T0,
        due_at=T0 + timedelta(seconds=3),
        attempt=2,
        max_attempts=3,
        target_service="svc",
        target=target,  # type: ignore[arg-type]
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
    )


CASES = [
    (JOB_DEFINITIONS, _job()),
    (JOB_DEFINITIONS, JobTombstone(job_id="gone", version=9)),
    (RUN_EVENTS, _run(HttpTarget(url="https://x.example/y", headers=(("A", "b"),), body="{}"))),
    (RUN_EVENTS, _run(KafkaTarget(topic="user.events", key="k", value="v"))),
    (
        RUN_HEARTBEATS,
        RunHeartbeat(uuid.uuid4(), T0, 1, "w-1", T0 + timedelta(seconds=60), T0, "50%"),
    ),
    (
        RUN_RESULTS,
        RunResult(
            uuid.uuid4(),
            "j",
            "t",
            "svc",
            T0,
            1,
            "w-1",
            "failed",
            "scheduled",
            T0,
            T0,
            "HTTP 503",
            503,
        ),
    ),
    (RUN_DEAD, RunDead(uuid.uuid4(), "j", "t", T0, 3, T0, "HTTP 500")),
    (JOB_REJECTIONS, JobRejected("duetime.jobs", 3, 42, b"k", b"\x00\x01", "", "not Avro", T0)),
]


@pytest.mark.parametrize(
    ("codec", "obj"), CASES, ids=lambda v: getattr(v, "name", type(v).__name__)
)
def test_round_trip(codec: object, obj: object) -> None:
    data = codec.encode(obj)  # type: ignore[attr-defined]
    assert codec.decode(data, codec.headers()) == obj  # type: ignore[attr-defined]


def test_header_carries_fingerprint_and_wrong_one_is_refused() -> None:
    headers = RUN_EVENTS.headers()
    assert headers == [(SCHEMA_HEADER, RUN_EVENTS.fingerprint.encode())]
    data = RUN_EVENTS.encode(_run(KafkaTarget(topic="t", value="v")))
    with pytest.raises(CodecError, match="unknown schema fingerprint"):
        RUN_EVENTS.decode(data, [(SCHEMA_HEADER, b"0000000000000000")])


def test_truncated_trailing_and_null_records_are_codec_errors() -> None:
    data = RUN_EVENTS.encode(_run(KafkaTarget(topic="t", value="v")))
    with pytest.raises(CodecError):
        RUN_EVENTS.decode(data[: len(data) // 2])
    with pytest.raises(CodecError, match="trailing"):
        RUN_EVENTS.decode(data + b"\x00")
    with pytest.raises(CodecError, match="null"):
        RUN_EVENTS.decode(None)


def test_mutated_job_records_never_escape_as_other_exceptions() -> None:
    data = JOB_DEFINITIONS.encode(_job())  # type: ignore[arg-type]
    rng = random.Random(7)
    for _ in range(3000):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        with contextlib.suppress(CodecError, InvalidInput):
            JOB_DEFINITIONS.decode(bytes(mutated))


def test_semantically_invalid_job_record_names_the_field() -> None:
    job = _job()
    record = JOB_DEFINITIONS._to_record(job)  # type: ignore[arg-type]
    record["schedule"]["time_zone"] = "Mars/Olympus"
    import io

    from fastavro import schemaless_writer

    buffer = io.BytesIO()
    schemaless_writer(buffer, JOB_DEFINITIONS.schema, record)
    with pytest.raises(InvalidInput) as info:
        JOB_DEFINITIONS.decode(buffer.getvalue())
    assert "time_zone" in info.value.field


# --- secret references: only the name travels ------------------------------------------------
_SECRET_TARGET = HttpTarget(
    url="https://billing.example.com/run",
    headers=(
        ("Authorization", SecretRef(name="billing-api-token", prefix="Bearer ")),
        ("X-Api-Key", SecretRef(name="billing.key")),
        ("X-Team", "billing"),
    ),
)


def test_secret_references_round_trip_on_the_run_topics_and_in_the_store() -> None:
    run = _run(_SECRET_TARGET)
    data = RUN_EVENTS.encode(run)
    assert RUN_EVENTS.decode(data, RUN_EVENTS.headers()) == run
    assert b"billing-api-token" in data and b"Bearer " in data
    assert target_from_json(target_to_json(_SECRET_TARGET)) == _SECRET_TARGET
    # The store keeps the reference as a job file writes it.
    assert '["Authorization", {"secret": "billing-api-token", "prefix": "Bearer "}]' in (
        target_to_json(_SECRET_TARGET)
    )


def _job_with(target: HttpTarget) -> JobDefinition:
    """A valid job whose target is replaced without validation (as a foreign producer might)."""
    job = parse_job(
        {
            "id": "billing-daily",
            "version": 3,
            "schedule": {"cron": "0 9 * * *"},
            "target": {"http": {"url": "https://billing.example.com/run"}},
        }
    )
    return replace(job, target=target)


def test_secret_references_round_trip_on_the_jobs_topic() -> None:
    job = _job_with(_SECRET_TARGET)
    data = JOB_DEFINITIONS.encode(job)
    assert JOB_DEFINITIONS.decode(data, JOB_DEFINITIONS.headers()) == job


def test_a_literal_credential_on_the_jobs_topic_is_refused_with_its_field() -> None:
    """The jobs topic validates as a file does: the ingest sends such a record to
    jobs.rejected with this field and reason (and the reason does not quote the value)."""
    literal = HttpTarget(
        url="https://billing.example.com/run", headers=(("Authorization", "Bearer abc123xyz"),)
    )
    data = JOB_DEFINITIONS.encode(_job_with(literal))
    with pytest.raises(JobDefinitionError) as info:
        JOB_DEFINITIONS.decode(data, JOB_DEFINITIONS.headers())
    assert info.value.field == "job.target.http.headers.Authorization"
    assert '{"secret"' in info.value.reason and "abc123xyz" not in info.value.reason


def test_a_bad_secret_name_on_the_jobs_topic_is_refused() -> None:
    bad = HttpTarget(
        url="https://billing.example.com/run",
        headers=(("Authorization", SecretRef(name="../../etc/shadow")),),
    )
    data = JOB_DEFINITIONS.encode(_job_with(bad))
    with pytest.raises(JobDefinitionError) as info:
        JOB_DEFINITIONS.decode(data, JOB_DEFINITIONS.headers())
    assert info.value.field == "job.target.http.headers.Authorization.secret"
