"""The dispatcher's recorder with several PostgreSQL clusters: each run's row in its own cluster.

In-memory stores stand in for the clusters (the real ones: tests/integration/
test_clusters_services.py); the shard map is the real, pure one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from duetime.model import KafkaTarget, RunEvent
from duetime.shard_map import ShardMap
from duetime_dispatcher.recorder import DispatcherStore, EmittedRecorder
from tests.unit.test_dispatcher_fast_path import (
    T0,
    FakeProducer,
    FakeStore,
    S,
    release_of,
    run_event,
)

T = TypeVar("T")
MAP = ShardMap.even(["postgresql://a/db", "postgresql://b/db"])


class FakeClusters:
    """``ClusterStores.split`` over in-memory stores."""

    def __init__(self, stores: Sequence[FakeStore]) -> None:
        self.stores = stores

    def split(
        self, items: Iterable[T], job_id: Callable[[T], str]
    ) -> list[tuple[DispatcherStore, list[T]]]:
        parts = MAP.split(items, job_id)
        return [(self.stores[index], parts[index]) for index in sorted(parts)]


def job_in(cluster: int) -> str:
    """A job id whose shard the map places in ``cluster``."""
    return next(job for n in itertools.count() if MAP.cluster_of_job(job := f"job-{n}") == cluster)


def _recorder(home: FakeStore, other: FakeStore) -> EmittedRecorder[str]:
    return EmittedRecorder(
        home,
        FakeProducer(),  # type: ignore[arg-type]
        "duetime.runs.results",
        "dispatcher:host-1",
        clusters=FakeClusters([home, other]),
    )


def _runs(cluster: int, count: int) -> list[RunEvent]:
    target = KafkaTarget(topic="orders", key=None, value="x")
    return [replace(run_event(target), job_id=job_in(cluster)) for _ in range(count)]


def test_each_cluster_gets_one_statement_with_its_own_runs() -> None:
    home, other = FakeStore(), FakeStore()
    recorder = _recorder(home, other)
    runs = _runs(0, 3) + _runs(1, 2)
    releases = [release_of(run, n) for n, run in enumerate(runs)]
    for release, emission in releases:
        recorder.add(release, emission, T0 + S)
    written = asyncio.run(recorder.flush())
    assert written == [release for release, _ in releases]
    assert [[row[0] for row in call] for call in home.calls] == [[str(r.run_id) for r in runs[:3]]]
    assert [[row[0] for row in call] for call in other.calls] == [[str(r.run_id) for r in runs[3:]]]
    assert recorder.recorded == 5 and recorder.results_due == 5


def test_a_failing_cluster_keeps_only_its_own_runs_unacked() -> None:
    home, other = FakeStore(), FakeStore()
    recorder = _recorder(home, other)
    runs = _runs(0, 2) + _runs(1, 2)
    releases = [release_of(run, n) for n, run in enumerate(runs)]
    for release, emission in releases:
        recorder.add(release, emission, T0 + S)
    other.fail = True
    written = asyncio.run(recorder.flush())
    # The home cluster's runs are written and may be acked; the other cluster's wait.
    assert written == [release for release, _ in releases[:2]]
    assert recorder.pending == 2 and recorder.write_failures == 1
    other.fail = False
    assert asyncio.run(recorder.flush()) == [release for release, _ in releases[2:]]
    assert [[row[0] for row in call] for call in other.calls] == [[str(r.run_id) for r in runs[2:]]]
    assert len(home.calls) == 1  # nothing written twice
