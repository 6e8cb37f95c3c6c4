"""Resolving a batch of job definitions in memory: the same outcome as applying them one by one."""

from __future__ import annotations

import json
from typing import Any

from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.store.jobs import resolve_batch
from duetime.store.rows import batch_json_shared
from duetime.store.store import StoredJob


def _job(job_id: str, version: int | None = None, **extra: Any) -> JobDefinition:
    data: dict[str, Any] = {
        "id": job_id,
        "schedule": {"cron": "0 0 * * *"},
        "target": {"http": {"url": "https://example.com/hook"}},
        **extra,
    }
    if version is not None:
        data["version"] = version
    return parse_job(data)


def _stored(versions: dict[str, int]) -> dict[str, StoredJob]:
    return {job_id: StoredJob(version, "default") for job_id, version in versions.items()}


def _actions(plan: Any) -> list[tuple[str, str, int]]:
    return [(w.job_id, w.action, w.version) for w in plan.writes]


def test_versions_decide_against_the_stored_rows() -> None:
    plan = resolve_batch(
        [_job("new"), _job("newer", 5), _job("stale", 3), _job("bump")],
        _stored({"newer": 4, "stale": 3, "bump": 7}),
    )
    assert _actions(plan) == [
        ("new", "created", 1),
        ("newer", "updated", 5),
        ("stale", "unchanged", 3),
        ("bump", "updated", 8),
    ]
    assert [(job.job_id, version) for job, version in plan.upserts] == [
        ("new", 1),
        ("newer", 5),
        ("bump", 8),
    ]
    assert plan.deletes == ()


def test_the_same_job_twice_applies_in_order_and_writes_the_final_state_once() -> None:
    first, second = _job("dup", paused=True), _job("dup", tenant="team-b")
    plan = resolve_batch([first, second, _job("dup", 1)], _stored({"dup": 1}))
    # version 0 = the version before it + 1; an explicit older version after them is stale.
    assert _actions(plan) == [("dup", "updated", 2), ("dup", "updated", 3), ("dup", "unchanged", 1)]
    assert [(job.tenant, version) for job, version in plan.upserts] == [("team-b", 3)]


def test_tombstones_delete_only_newer_and_report_missing_jobs() -> None:
    plan = resolve_batch(
        [JobTombstone("gone", 3), JobTombstone("kept", 2), JobTombstone("never", 9)],
        _stored({"gone": 2, "kept": 2}),
    )
    assert _actions(plan) == [
        ("gone", "deleted", 3),
        ("kept", "unchanged", 2),
        ("never", "not_found", 9),
    ]
    assert plan.deletes == (("gone", 3),) and plan.upserts == ()


def test_delete_then_define_again_recreates_the_job() -> None:
    plan = resolve_batch([JobTombstone("again", 6), _job("again")], _stored({"again": 5}))
    assert _actions(plan) == [("again", "deleted", 6), ("again", "created", 1)]
    assert plan.deletes == (("again", 6),)
    assert [(job.job_id, version) for job, version in plan.upserts] == [("again", 1)]


def test_define_then_delete_in_one_batch_leaves_nothing_to_write() -> None:
    plan = resolve_batch([_job("brief"), JobTombstone("brief", 2)], {})
    assert _actions(plan) == [("brief", "created", 1), ("brief", "deleted", 2)]
    assert plan.deletes == () and plan.upserts == ()


def test_batch_json_shared_sends_each_column_once_in_rows_or_in_shared() -> None:
    records = [
        {"job_id": "a", "paused": False, "start_at": None, "window_ms": 0, "target": {"k": 1}},
        {
            "job_id": "b",
            "paused": False,
            "start_at": "2031-01-01T00:00:00+00:00",
            "window_ms": 0,
            "target": {"k": 1},
        },
    ]
    rows, shared = (json.loads(part) for part in batch_json_shared(records))
    assert shared == {"paused": False, "window_ms": 0, "target": {"k": 1}}
    assert rows == [
        {"job_id": "a", "start_at": None},
        {"job_id": "b", "start_at": records[1]["start_at"]},
    ]
    assert [row | shared for row in rows] == records
    # One record: every column is shared, each row is empty.
    rows, shared = (json.loads(part) for part in batch_json_shared(records[:1]))
    assert (rows, shared) == ([{}], records[0])
