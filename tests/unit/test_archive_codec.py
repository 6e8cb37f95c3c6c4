"""Archive objects: Avro container files that round-trip, and the same rows give the same bytes
(so a retried archive writes the same key)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from duetime.archive.codec import decode_runs, encode_runs, sha256_hex
from duetime.archive.model import ArchivedAttempt, ArchivedRun
from duetime.errors import ArchiveError

DAY = date(2026, 11, 23)
AT = datetime(2026, 11, 23, 2, 0, tzinfo=UTC)


def _run(job_id: str, n: int) -> ArchivedRun:
    return ArchivedRun(
        run_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{job_id}|{n}"),
        job_id=job_id,
        tenant="acme",
        target_service="api.example.com",
        scheduled_for=AT + timedelta(minutes=n),
        due_at=AT + timedelta(minutes=n, seconds=7),
        state="dead",
        attempt=2,
        max_attempts=2,
        worker="w-1",
        progress=None,
        last_error="HTTP 500 \u2013 upstream",
        publish_count=1,
        throttled_ms=None,
        published_at=AT,
        released_at=AT,
        started_at=AT,
        finished_at=AT + timedelta(seconds=1),
        dead_published_at=None,
        created_at=AT - timedelta(hours=1),
        updated_at=AT + timedelta(seconds=1, microseconds=5),
        attempts=(
            ArchivedAttempt(1, "w-1", AT, AT, "failed", 500, "HTTP 500", 12),
            ArchivedAttempt(2, "w-2", AT, None, None, None, None, None),
        ),
    )


def test_round_trip_and_stable_bytes() -> None:
    runs = [_run("../../etc/passwd", 1), _run("nightly", 2)]
    data = encode_runs(DAY, runs)
    assert decode_runs(data) == runs
    assert encode_runs(DAY, runs) == data
    assert sha256_hex(encode_runs(DAY, [runs[0], replace(runs[1], state="succeeded")])) != (
        sha256_hex(data)
    )


def test_damaged_objects_do_not_decode() -> None:
    data = encode_runs(DAY, [_run("a", 1)])
    with pytest.raises(ArchiveError):
        decode_runs(data[: len(data) // 2])
    with pytest.raises(ArchiveError):
        decode_runs(b"not avro at all")
