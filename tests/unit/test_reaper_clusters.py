"""The reaper over several clusters: each pass once per cluster, a failing cluster logged and
passed over (``duetime_reaper.clusters``, ``archiving.PeriodicArchive``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from duetime.errors import StoreError
from duetime_reaper.archiving import ArchiveSchedule, PeriodicArchive
from duetime_reaper.clusters import each_cluster

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _fails_on(bad: set[int]) -> tuple[list[int], Callable[[int], int]]:
    seen: list[int] = []

    def run(cluster: int) -> int:
        seen.append(cluster)
        if cluster in bad:
            raise StoreError(f"cluster {cluster} is down")
        return cluster * 10

    return seen, run


def test_a_failing_cluster_is_passed_over(caplog: pytest.LogCaptureFixture) -> None:
    seen, run = _fails_on({1})
    assert each_cluster("scan", [0, 1, 2], run) == [0, 20]
    assert seen == [0, 1, 2]
    assert "reaper.cluster_failed" in caplog.text and "cluster=1" in caplog.text


def test_the_pass_fails_only_when_every_cluster_failed() -> None:
    _, run = _fails_on({0, 1})
    with pytest.raises(StoreError, match="cluster 1"):
        each_cluster("scan", [0, 1], run)


def test_one_cluster_fails_as_it_always_did(caplog: pytest.LogCaptureFixture) -> None:
    _, run = _fails_on({0})
    with pytest.raises(StoreError, match="cluster 0"):
        each_cluster("scan", [0], run)
    assert "reaper.cluster_failed" not in caplog.text


class FakeArchiver:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.runs: list[datetime] = []

    def run_once(self, now: datetime) -> None:
        self.runs.append(now)
        if self.fail:
            raise StoreError("database error: connection refused")


def test_every_clusters_archive_runs_even_after_one_failed() -> None:
    archivers = [FakeArchiver(fail=True), FakeArchiver()]
    periodic = PeriodicArchive(archivers, ArchiveSchedule(), clock=lambda: NOW)  # type: ignore[arg-type]
    assert periodic.run_once() == 1
    assert [a.runs for a in archivers] == [[NOW], [NOW]]
