"""Secret header values end to end, on the real stack with every service as a process.

Jobs name their credentials (``{"secret": ...}``), one applied as ``duetime jobs apply`` does and
one sent on the jobs topic; the worker processes hold the values, one in ``DUETIME_SECRETS_DIR``
and one in ``DUETIME_SECRET_<NAME>``. The target must receive the values, and the raw bytes of
every topic, every table and every service log must not contain them. A job that writes its
credential literally on the jobs topic is refused onto ``jobs.rejected``, whole, with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from duetime.bus.kafka import consumer_config, producer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.model import HttpTarget
from tests.fixtures.target import RecordingTarget

from .pipeline import TERMINAL, Pipeline, e2e_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


@dataclass
class SecretPipeline:
    pipeline: Pipeline
    file_secret: str  # in DUETIME_SECRETS_DIR/billing-api-token
    env_secret: str  # in DUETIME_SECRET_CRM_KEY


@pytest.fixture
def secrets(database_url: str, stack: Any, tmp_path: Path) -> Iterator[SecretPipeline]:
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o700)
    file_secret = f"file-s3cr3t-{uuid.uuid4().hex}"
    env_secret = f"env-s3cr3t-{uuid.uuid4().hex}"
    (directory / "billing-api-token").write_text(file_secret + "\n")
    pipeline = Pipeline(database_url, stack.kafka_bootstrap, tmp_path)
    pipeline.env["DUETIME_SECRETS_DIR"] = str(directory)
    pipeline.env["DUETIME_SECRET_CRM_KEY"] = env_secret
    pipeline.start_all()
    try:
        yield SecretPipeline(pipeline, file_secret, env_secret)
    finally:
        pipeline.stop_all()


def _records(settings: Settings, topic: str) -> list[Any]:
    """Every record on ``topic`` up to its current end, read without joining a group."""
    consumer = Consumer(consumer_config(settings, f"reader-{uuid.uuid4().hex[:8]}"))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: list[Any] = []
        position = {p: 0 for p in partitions}
        for _ in range(2000):
            if all(position[p] >= ends[p] for p in partitions):
                break
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                found.append(msg)
                position[msg.partition()] = msg.offset() + 1
        return found
    finally:
        consumer.close()


def _raw_bytes(msg: Any) -> bytes:
    headers = b"".join(k.encode() + (v or b"") for k, v in msg.headers() or [])
    return (msg.key() or b"") + (msg.value() or b"") + headers


def _database_text(pipeline: Pipeline) -> str:
    """Every row of every table of the schema, as PostgreSQL prints it."""
    tables = pipeline.sql(
        "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) AS name "
        "FROM pg_tables WHERE schemaname = 'public'"
    )
    rows: list[str] = []
    for table in tables:
        rows += [r.line for r in pipeline.sql(f"SELECT t::text AS line FROM {table.name} t")]
    return "\n".join(rows)


def _job_with_headers(job_id: str, url: str, headers: dict[str, Any]) -> dict[str, Any]:
    job = e2e_job(job_id, url)
    job["target"]["http"]["headers"] = headers
    return job


def test_secrets_reach_the_target_and_nothing_else(
    secrets: SecretPipeline, http_target: RecordingTarget
) -> None:
    pipeline = secrets.pipeline
    catalog = TopicCatalog(pipeline.prefix)
    references = {
        "Authorization": {"secret": "billing-api-token", "prefix": "Bearer "},
        "X-Api-Key": {"secret": "crm-key"},
        "X-Team": "billing",
    }
    # Job A as `duetime jobs apply` writes it; job B and the literal job C on the jobs topic.
    pipeline.apply([_job_with_headers("secret-a", f"{http_target.url}/ok/secret-a", references)])
    topic_job = parse_job(
        {
            **_job_with_headers("secret-b", f"{http_target.url}/ok/secret-b", references),
            "version": 1,
        }
    )
    literal_value = f"Bearer literal-{uuid.uuid4().hex}"
    literal_job = replace(
        parse_job({**e2e_job("literal-c", f"{http_target.url}/ok/literal-c"), "version": 1}),
        target=HttpTarget(
            url=f"{http_target.url}/ok/literal-c", headers=(("Authorization", literal_value),)
        ),
    )
    literal_bytes = JOB_DEFINITIONS.encode(literal_job)
    producer = Producer(producer_config(pipeline.settings))
    for job_id, value in (
        ("secret-b", JOB_DEFINITIONS.encode(topic_job)),
        ("literal-c", literal_bytes),
    ):
        producer.produce(catalog.jobs, value, job_id.encode(), headers=JOB_DEFINITIONS.headers())
    assert producer.flush(10) == 0

    for path in ("/ok/secret-a", "/ok/secret-b"):
        pipeline.wait_until(
            f"two calls to {path}", lambda path=path: len(http_target.matching(path)) >= 2, 60
        )
    pipeline.sql("UPDATE jobs SET paused = true")

    # The target received the values, with the prefix.
    for request in http_target.matching("/ok/secret-"):
        assert request.headers["Authorization"] == f"Bearer {secrets.file_secret}"
        assert request.headers["X-Api-Key"] == secrets.env_secret
        assert request.headers["X-Team"] == "billing"
    assert http_target.matching("/ok/literal-c") == []

    # The literal job was refused as a whole onto jobs.rejected, with the field and the way out.
    def rejection() -> Any:
        found = [
            m for m in _records(pipeline.settings, catalog.jobs_rejected) if m.key() == b"literal-c"
        ]
        return found[0] if found else None

    rejected = pipeline.wait_until("the rejection", rejection, 30)
    record = JOB_REJECTIONS.decode(rejected.value(), rejected.headers())
    assert record.field == "job.target.http.headers.Authorization"
    assert '{"secret"' in record.reason and literal_value not in record.reason
    assert record.value == literal_bytes  # nothing lost: the record as it was sent
    assert pipeline.sql("SELECT job_id FROM jobs WHERE job_id = 'literal-c'") == []

    def all_finished() -> bool:
        rows = pipeline.sql(
            "SELECT count(*) AS n FROM runs WHERE state <> ALL(:t)", t=list(TERMINAL)
        )
        return rows[0].n == 0

    pipeline.wait_until("every run to finish", all_finished, 30)
    states = pipeline.sql("SELECT DISTINCT state FROM runs")
    assert [s.state for s in states] == ["succeeded"]

    # Only the references travelled: on the run topics the records name the secret...
    due = [m for t in catalog.due_topics for m in _records(pipeline.settings, t)]
    ready = _records(pipeline.settings, catalog.ready)
    assert len(due) >= 4 and len(ready) >= 4
    assert all(b"billing-api-token" in m.value() and b"crm-key" in m.value() for m in due + ready)
    # ... and no byte of any topic, table or log holds a value.
    topics = [
        catalog.jobs,
        catalog.jobs_rejected,
        catalog.results,
        catalog.heartbeats,
        catalog.dead,
    ]
    everything = due + ready + [m for t in topics for m in _records(pipeline.settings, t)]
    database = _database_text(pipeline)
    logs = "".join(pipeline.log_text(name) for name in pipeline.processes)
    stored = pipeline.sql(
        "SELECT target -> 'http' -> 'headers' AS headers FROM jobs ORDER BY job_id"
    )
    assert [row.headers for row in stored] == 2 * [
        [
            ["Authorization", {"secret": "billing-api-token", "prefix": "Bearer "}],
            ["X-Api-Key", {"secret": "crm-key", "prefix": ""}],
            ["X-Team", "billing"],
        ]
    ]
    # The scans do see what they look for: the literal job's record, and the references.
    assert [m for m in everything if literal_value.encode() in _raw_bytes(m)]
    assert "billing-api-token" in database and "crm-key" in database
    for value in (secrets.file_secret, secrets.env_secret):
        assert not [m for m in everything if value.encode() in _raw_bytes(m)]
        assert value not in database
        assert value not in logs
