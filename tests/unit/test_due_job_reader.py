"""The due scan's rows into DueJobs: a job's definition is parsed once while its columns stay."""

from __future__ import annotations

import json
from collections import namedtuple
from datetime import UTC, datetime, timedelta
from typing import Any

from duetime.model import HttpTarget, KafkaTarget
from duetime.store.rows import DUE_BATCH_COLUMNS, DueJob, DueJobReader

NOW = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
# A row as the store hands it over: by position and by name.
Row = namedtuple("Row", DUE_BATCH_COLUMNS)  # type: ignore[misc]


def _row(job_id: str, *, next_run_at: datetime = NOW, **changed: Any) -> Any:
    """A row of ``jobs_get_due_batch`` (the target as the text the query casts it to), its
    columns given by name and put in the query's order."""
    target = {"kafka": {"topic": "events", "key": job_id, "value": "{}"}}
    columns: dict[str, Any] = {
        "job_id": job_id,
        "tenant": "t",
        "schedule_kind": "interval",
        "schedule_expr": "PT1S",
        "time_zone": "UTC",
        "dst_gap": "shift",
        "dst_overlap": "first",
        "start_at": None,
        "window_ms": 0,
        "catch_up": "once",
        "max_catch_up": 100,
        "target_service": "svc",
        "max_attempts": 3,
        "next_run_at": next_run_at,
        "last_scheduled_for": None,
        "target": json.dumps(target),
        "lease_ms": 30_000,
        "heartbeat_ms": 5_000,
        "retry_initial_ms": 1_000,
        "retry_multiplier": 2.0,
        "retry_max_ms": 60_000,
        "retry_jitter": 0.1,
        "shard_id": 7,
    }
    return Row(**(columns | changed))


def test_an_unchanged_definition_is_parsed_once_and_shared() -> None:
    reader = DueJobReader()
    first = reader.read(_row("a"))
    second = reader.read(_row("a", next_run_at=NOW + timedelta(seconds=1)))
    assert reader.parsed == 1
    assert second.shape is first.shape
    # Where the job stands comes from each row; the definition from the shared shape.
    assert second.next_run_at == NOW + timedelta(seconds=1) and first.next_run_at == NOW
    assert second.target == KafkaTarget(topic="events", key="a", value="{}")
    assert second.lease == timedelta(seconds=30) and second.shard_id == 7
    # The same definition as parsing the row from scratch.
    fresh = DueJob.from_row(_row("a"))
    for name in ("tenant", "schedule", "window", "catch_up", "max_catch_up", "target_service",
                 "max_attempts", "target", "lease", "heartbeat_interval", "retry"):  # fmt: skip
        assert getattr(second, name) == getattr(fresh, name), name


def test_a_changed_column_is_parsed_again() -> None:
    reader = DueJobReader()
    old = reader.read(_row("a"))
    url = json.dumps({"http": {"url": "https://example.test/", "method": "POST", "headers": [],
                               "body": None, "timeout_ms": 5000}})  # fmt: skip
    new = reader.read(_row("a", target=url))
    assert reader.parsed == 2 and new.shape is not old.shape
    assert isinstance(new.target, HttpTarget) and new.target.url == "https://example.test/"
    again = reader.read(_row("a", target=url, lease_ms=60_000))
    assert reader.parsed == 3 and again.lease == timedelta(minutes=1)
    # Another job with the same columns is still its own definition.
    assert reader.read(_row("b", target=url)).shape is not new.shape


def test_the_kept_definitions_are_bounded() -> None:
    reader = DueJobReader(max_jobs=2)
    reader.read(_row("a"))
    reader.read(_row("b"))
    reader.read(_row("c"))  # full: the kept ones are dropped, c is kept
    assert reader.read(_row("c")).target == KafkaTarget(topic="events", key="c", value="{}")
    assert reader.parsed == 3
    reader.read(_row("a"))  # parsed again
    assert reader.parsed == 4
