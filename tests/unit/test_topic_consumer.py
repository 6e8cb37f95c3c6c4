"""The example downstream consumer (examples/topic_consumer.py) decodes what duetime writes,
knowing only schemas/ and the fingerprint header."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from duetime.bus.records import (
    JOB_DEFINITIONS,
    JOB_REJECTIONS,
    RUN_DEAD,
    RUN_EVENTS,
    RUN_HEARTBEATS,
    RUN_RESULTS,
)
from duetime.events import RunDead
from examples.topic_consumer import Schemas


def test_its_fingerprints_are_the_ones_duetime_writes() -> None:
    codecs = (JOB_DEFINITIONS, JOB_REJECTIONS, RUN_EVENTS, RUN_HEARTBEATS, RUN_RESULTS, RUN_DEAD)
    known = Schemas().by_fingerprint
    assert {codec.fingerprint.encode(): codec.name for codec in codecs} == {
        key: name for key, (name, _parsed) in known.items()
    }


def test_it_decodes_a_record_and_refuses_an_unknown_fingerprint() -> None:
    dead = RunDead(
        run_id=uuid.uuid4(),
        job_id="billing",
        tenant="acme",
        scheduled_for=datetime(2026, 3, 1, 10, tzinfo=UTC),
        attempts=3,
        dead_at=datetime(2026, 3, 1, 10, 0, 9, tzinfo=UTC),
        last_error="HTTP 500",
    )
    headers = [(k, v if isinstance(v, bytes) else None) for k, v in RUN_DEAD.headers()]
    name, record = Schemas().decode(RUN_DEAD.encode(dead), headers)
    assert name == "duetime.RunDead"
    assert (record["run_id"], record["attempts"], record["last_error"]) == (
        dead.run_id,
        3,
        "HTTP 500",
    )
    assert record["dead_at"] == dead.dead_at
    with pytest.raises(LookupError, match="unknown schema fingerprint"):
        Schemas().decode(RUN_DEAD.encode(dead), [("duetime-schema", b"0000000000000000")])
