"""``duetime replay`` and ``duetime reemit`` on the real broker (and PostgreSQL for reemit).

The broker is the local tansu, whose offsets_for_times matches batch append times and answers 0
for "nothing newer" (docs/consumers.md): replay must still return exactly the records stamped at
or after --since (and before --until), because it skips older ones on the client.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from duetime.bus.kafka import create_topics, producer_config
from duetime.bus.records import RUN_DEAD, RUN_EVENTS, RUN_RESULTS
from duetime.bus.replay import read_since
from duetime.bus.topics import TopicCatalog
from duetime.cli.main import main
from duetime.config import Settings
from duetime.events import RunResult
from duetime.jobdef import parse_jobs
from duetime.store import NewRun, Store
from duetime.store.jobs import jobs_apply

pytestmark = pytest.mark.integration

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture
def bus(stack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Settings]:
    """Settings with a topic prefix of this test's own, its topics created, the CLI pointed at
    them."""
    prefix = f"r{uuid.uuid4().hex[:8]}."
    settings = Settings(database_url="", kafka_bootstrap=stack.kafka_bootstrap, topic_prefix=prefix)
    create_topics(settings)
    monkeypatch.setenv("DUETIME_KAFKA_BOOTSTRAP", stack.kafka_bootstrap)
    monkeypatch.setenv("DUETIME_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    yield settings


def _result(key: str) -> bytes:
    now = datetime.now(UTC)
    return RUN_RESULTS.encode(
        RunResult(
            run_id=uuid.UUID(key),
            job_id="job",
            tenant="t",
            target_service="svc",
            scheduled_for=now,
            attempt=1,
            worker="w",
            outcome="succeeded",
            state="succeeded",
            started_at=now,
            finished_at=now,
        )
    )


def _produce(
    settings: Settings, topic: str, count: int, stamp: datetime | None = None
) -> list[str]:
    """``count`` run results in as few batches as the producer likes; their keys."""
    producer = Producer(producer_config(settings, **{"linger.ms": 50}))
    keys = [str(uuid.uuid4()) for _ in range(count)]
    extra = {"timestamp": int((stamp - EPOCH).total_seconds() * 1000)} if stamp else {}
    for key in keys:
        producer.produce(topic, _result(key), key.encode(), headers=RUN_RESULTS.headers(), **extra)
    assert producer.flush(10) == 0
    return keys


def _pause() -> datetime:
    """An instant strictly between what was produced before and what is produced after."""
    time.sleep(1.1)
    instant = datetime.now(UTC)
    time.sleep(1.1)
    return instant


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_replay_returns_exactly_the_records_stamped_in_the_range(
    bus: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = TopicCatalog(bus.topic_prefix).results
    before = _produce(bus, topic, 30)
    since = _pause()
    inside = _produce(bus, topic, 30)
    # Appended after --since but stamped before it: replay goes by the record's timestamp.
    late_stamped = _produce(bus, topic, 1, stamp=since - timedelta(seconds=10))
    until = _pause()
    after = _produce(bus, topic, 10)

    out = tmp_path / "replay.jsonl"
    argv = ["replay", "--topic", "runs.results", "--since", since.isoformat()]
    assert main([*argv, "--until", until.isoformat(), "--out", str(out)]) == 0
    records = _lines(out)
    assert sorted(r["key"] for r in records) == sorted(inside)
    for record in records:
        assert record["topic"] == topic
        assert record["schema"] == "duetime.RunResult"
        assert record["value"]["run_id"] == record["key"]
        assert ["duetime-schema", RUN_RESULTS.fingerprint] in record["headers"]
        assert since <= datetime.fromisoformat(record["timestamp"]) < until
    summary = capsys.readouterr().err
    assert f"replay topic={topic} partitions=8" in summary and "printed=30" in summary

    # Without --until, to stdout: everything stamped from --since on.
    assert main(argv) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["key"] for r in printed) == sorted(inside + after)
    assert not set(before + late_stamped) & {r["key"] for r in printed}


def test_replay_to_another_topic_keeps_keys_values_and_headers(
    bus: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = TopicCatalog(bus.topic_prefix)
    _produce(bus, catalog.results, 5)
    since = _pause()
    wanted = _produce(bus, catalog.results, 12)
    assert (
        main(
            ["replay", "--topic", "runs.results", "--since", since.isoformat(), "--to", "runs.dead"]
        )
        == 0
    )
    assert "republished=12" in capsys.readouterr().err
    copies = list(read_since(bus, catalog.dead, EPOCH))
    originals = {r.key: r for r in read_since(bus, catalog.results, since) if r.key is not None}
    assert sorted(r.key.decode() for r in copies if r.key) == sorted(wanted)
    for copy in copies:
        assert copy.key is not None
        original = originals[copy.key]
        assert (copy.value, copy.headers) == (original.value, original.headers)


def test_replay_refuses_bad_input_in_one_line(
    bus: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "--topic", "runs.ready", "--since", "2026-01-01T00:00:00"]) == 2
    assert capsys.readouterr().err.strip() == (
        "duetime: error: --since: '2026-01-01T00:00:00' has no offset; add Z or +HH:MM"
    )
    assert (
        main(
            [
                "replay",
                "--topic",
                "runs.ready",
                "--since",
                "2026-01-01T00:00:00Z",
                "--to",
                "runs.ready",
            ]
        )
        == 2
    )
    assert main(["replay", "--topic", "no.such.topic", "--since", "2026-01-01T00:00:00Z"]) == 1
    assert capsys.readouterr().err.strip().endswith("topic no.such.topic is not there")


def _runs(store: Store, job_id: str, slots: list[datetime], state: str) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in slots]
    with store.tx() as tx:
        for day in {slot.date() for slot in slots}:
            tx.runs_ensure_partition(day)
        tx.runs_insert(
            [
                NewRun(run_id, job_id, "acme", "svc", slot, slot, 3)
                for run_id, slot in zip(ids, slots, strict=True)
            ]
        )
    if state != "scheduled":
        with store.engine.begin() as conn:
            from sqlalchemy import text

            conn.execute(
                text(
                    "UPDATE runs SET state = :s, attempt = 2, finished_at = now(),"
                    " last_error = 'boom' WHERE run_id = ANY(:ids)"
                ),
                {"s": state, "ids": ids},
            )
    return ids


def test_reemit_publishes_the_ended_runs_of_a_range_from_the_database(
    bus: Settings,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DUETIME_DATABASE_URL", database_url)
    store = Store(database_url, pool_size=1)
    jobs = [
        {
            "id": job_id,
            "tenant": "acme",
            "schedule": {"interval": "PT1H"},
            "target": {"http": {"url": "https://example.com/hook"}},
            "target_service": "svc",
        }
        for job_id in ("billing", "other")
    ]
    with store.tx() as tx:
        jobs_apply(tx, parse_jobs(jobs))
    start = datetime(2026, 3, 1, 10, tzinfo=UTC)
    hour = timedelta(hours=1)
    in_range = [start + hour * i for i in range(3)]
    succeeded = _runs(store, "billing", in_range, "succeeded")
    dead = _runs(store, "billing", [start + 3 * hour], "dead")
    _runs(store, "billing", [start + 4 * hour], "scheduled")  # not ended: never re-emitted
    _runs(store, "billing", [start - hour, start + 6 * hour], "succeeded")  # outside the range
    _runs(store, "other", in_range, "succeeded")  # another job
    store.close()
    catalog = TopicCatalog(bus.topic_prefix)
    window = ["--from", start.isoformat(), "--to", (start + 5 * hour).isoformat()]

    assert main(["reemit", *window, "--job", "billing"]) == 0
    assert "records=4" in capsys.readouterr().err
    events = list(read_since(bus, catalog.ready, EPOCH))
    decoded = {RUN_EVENTS.decode(r.value, r.headers).run_id: r for r in events}
    assert set(decoded) == set(succeeded + dead)
    for run_id, record in decoded.items():
        run = RUN_EVENTS.decode(record.value, record.headers)
        assert (run.job_id, run.attempt, run.tenant) == ("billing", 2, "acme")
        assert record.key == str(run_id).encode()
        assert ("duetime-reemitted", b"1") in record.headers

    assert main(["reemit", *window, "--topic", "dead"]) == 0
    [record] = list(read_since(bus, catalog.dead, EPOCH))
    dead_run = RUN_DEAD.decode(record.value, record.headers)
    assert (dead_run.run_id, dead_run.attempts, dead_run.last_error) == (dead[0], 2, "boom")


def test_the_example_consumer_decodes_a_topic_by_its_fingerprint_header(
    bus: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.topic_consumer import Schemas, run

    topic = TopicCatalog(bus.topic_prefix).results
    keys = _produce(bus, topic, 7)
    group = f"{bus.topic_prefix}example"
    assert run(bus.kafka_bootstrap, topic, group, Schemas(), max_records=7) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(line["key"] for line in lines) == sorted(keys)
    for line in lines:
        assert line["schema"] == "duetime.RunResult"
        assert line["value"]["run_id"] == line["key"]
        assert line["value"]["outcome"] == "succeeded"
