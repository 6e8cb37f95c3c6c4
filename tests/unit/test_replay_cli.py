"""duetime replay's pieces that need no broker: instants, topic names, records as JSON."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from duetime.bus.records import RUN_DEAD
from duetime.bus.replay import ReplayedRecord, codecs_by_fingerprint, to_json
from duetime.bus.topics import TopicCatalog
from duetime.cli.replay_cmd import parse_instant, resolve_topic
from duetime.errors import InvalidInput
from duetime.events import RunDead


def test_instants_need_an_offset() -> None:
    assert parse_instant("--since", "2026-03-01T10:00:00+01:00") == datetime(
        2026, 3, 1, 9, tzinfo=UTC
    )
    assert parse_instant("--since", "2026-03-01T10:00:00Z") == datetime(2026, 3, 1, 10, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="has no offset"):
        parse_instant("--since", "2026-03-01T10:00:00")
    with pytest.raises(InvalidInput, match="not an ISO-8601 instant"):
        parse_instant("--until", "yesterday")


def test_topic_names_with_or_without_the_prefix() -> None:
    catalog = TopicCatalog("p.")
    assert resolve_topic(catalog, "runs.ready") == "p.runs.ready"
    assert resolve_topic(catalog, "p.runs.dead") == "p.runs.dead"
    assert resolve_topic(catalog, "billing.events") == "billing.events"  # a Kafka target's


def _record(value: bytes | None, headers: list[tuple[str, bytes | None]]) -> ReplayedRecord:
    return ReplayedRecord(
        "p.runs.dead", 3, 42, datetime(2026, 3, 1, tzinfo=UTC), b"k", value, headers
    )


def test_a_record_as_json_decoded_by_its_fingerprint() -> None:
    dead = RunDead(
        run_id=uuid.UUID(int=7),
        job_id="billing",
        tenant="acme",
        scheduled_for=datetime(2026, 3, 1, 10, tzinfo=UTC),
        attempts=3,
        dead_at=datetime(2026, 3, 1, 10, 0, 9, tzinfo=UTC),
    )
    headers = [("duetime-schema", RUN_DEAD.fingerprint.encode()), ("other", b"\xff")]
    doc = to_json(_record(RUN_DEAD.encode(dead), headers), codecs_by_fingerprint())
    assert doc["schema"] == "duetime.RunDead"
    assert doc["value"] == {
        "run_id": str(uuid.UUID(int=7)),
        "job_id": "billing",
        "tenant": "acme",
        "scheduled_for": "2026-03-01T10:00:00Z",
        "attempts": 3,
        "dead_at": "2026-03-01T10:00:09Z",
        "last_error": None,
    }
    assert (doc["topic"], doc["partition"], doc["offset"], doc["key"]) == (
        "p.runs.dead",
        3,
        42,
        "k",
    )
    assert doc["headers"] == [
        ["duetime-schema", RUN_DEAD.fingerprint],
        ["other", {"base64": "/w=="}],
    ]


def test_a_value_that_does_not_decode_is_kept_in_base64_with_the_reason() -> None:
    codecs = codecs_by_fingerprint()
    wrong = to_json(_record(b"\x01", [("duetime-schema", RUN_DEAD.fingerprint.encode())]), codecs)
    assert "not valid Avro" in wrong["decode_error"] and wrong["value_base64"] == "AQ=="
    unknown = to_json(_record(b"\x01", [("duetime-schema", b"0" * 16)]), codecs)
    assert unknown["decode_error"] == "no duetime-schema header with a known fingerprint"
    assert "value" not in unknown
