"""The project's one log module: event names and fields, as text lines or JSON lines."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest

from duetime import logs
from duetime.bus.kafka import make_producer
from duetime.config import Settings
from duetime_workers import logs as worker_logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """A stream for configure_logging, with the root logger restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_event_service_and_fields(captured: io.StringIO) -> None:
    logs.configure_logging("planner", "INFO", "json", stream=captured)
    run_id = uuid.UUID("11111111-2222-3333-4444-555555555555")
    log = logging.getLogger("duetime.planner")
    logs.event(log, "runs.published", count=3, run_id=run_id, skipped=None, service="x")
    logs.event(log, "run.dead", logging.ERROR, error='HTTP 500 "oops"\nmore')
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert first["event"] == "runs.published"
    assert (first["level"], first["service"], first["logger"]) == ("INFO", "planner", log.name)
    assert first["count"] == 3 and first["run_id"] == str(run_id)
    assert "skipped" not in first
    assert first["service_"] == "x"  # a field never overwrites a key of the line itself
    assert first["ts"].endswith("Z")
    assert (second["event"], second["level"]) == ("run.dead", "ERROR")
    assert second["error"] == 'HTTP 500 "oops"\nmore'


def test_json_lines_for_other_libraries_and_exceptions(captured: io.StringIO) -> None:
    logs.configure_logging("dispatcher", "INFO", "json", stream=captured)
    logging.getLogger("some.library").warning("plain %s", "message")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("duetime.dispatcher").exception("dispatcher.crashed")
    plain, crashed = (json.loads(line) for line in captured.getvalue().splitlines())
    assert (plain["event"], plain["message"]) == ("log", "plain message")
    assert crashed["message"] == "dispatcher.crashed"
    assert "ValueError: boom" in crashed["exception"]


def test_text_is_the_default_and_quotes_what_would_not_split(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(logs.LOG_FORMAT_ENV, raising=False)
    logs.configure_logging("reaper", "INFO", stream=captured)
    logs.event(logging.getLogger("duetime.reaper"), "lease.expired", worker="w 1", attempt=2)
    line = captured.getvalue().strip()
    assert line.endswith('INFO reaper lease.expired worker="w 1" attempt=2')
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_the_environment_chooses_json_and_the_worker_uses_the_same_format(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(logs.LOG_FORMAT_ENV, "json")
    worker_logs.configure_logging("INFO", stream=captured)
    worker_logs.event("run.claimed", run_id="r1", attempt=1)
    doc = json.loads(captured.getvalue())
    assert (doc["service"], doc["logger"], doc["event"]) == (
        "worker",
        "duetime.worker",
        "run.claimed",
    )
    assert (doc["run_id"], doc["attempt"]) == ("r1", 1)


def test_an_unknown_format_falls_back_to_text_and_says_so(captured: io.StringIO) -> None:
    logs.configure_logging("planner", "INFO", "yaml", stream=captured)
    line = captured.getvalue().strip()
    assert "WARNING planner log.format_unknown format=yaml known=text,json" in line


def test_librdkafka_lines_come_out_in_the_service_format(captured: io.StringIO) -> None:
    logs.configure_logging("worker", "INFO", "json", stream=captured)
    producer = make_producer(Settings(database_url="", kafka_bootstrap="127.0.0.1:1"))
    producer.produce("nowhere", b"v")
    for _ in range(20):  # its log lines are delivered when the client is polled
        producer.poll(0.1)
        if captured.getvalue():
            break
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert lines, "librdkafka logged nothing about a broker that refuses connections"
    assert {line["logger"] for line in lines} == {"librdkafka"}
    assert any("Connection refused" in line["message"] for line in lines)
