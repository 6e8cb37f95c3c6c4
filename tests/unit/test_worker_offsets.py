"""Commit positions when attempts finish out of order: never past an unhandled offset."""

from __future__ import annotations

from duetime_workers.offsets import OffsetTracker

P0 = ("runs.ready", 0)
P1 = ("runs.ready", 1)


def test_nothing_to_commit_until_something_is_fetched() -> None:
    assert OffsetTracker().to_commit() == []


def test_commit_stops_at_the_first_unhandled_offset() -> None:
    tracker = OffsetTracker()
    for offset in (5, 6, 7):
        tracker.fetched(P0, offset)
    assert tracker.to_commit() == [("runs.ready", 0, 5)]
    tracker.handled(P0, 7)
    tracker.handled(P0, 6)
    assert tracker.to_commit() == []  # 5 is still running: position stays at 5
    tracker.handled(P0, 5)
    assert tracker.to_commit() == [("runs.ready", 0, 8)]
    assert tracker.unhandled() == 0


def test_positions_are_reported_once_per_change() -> None:
    tracker = OffsetTracker()
    tracker.fetched(P0, 0)
    tracker.handled(P0, 0)
    assert tracker.to_commit() == [("runs.ready", 0, 1)]
    assert tracker.to_commit() == []


def test_partitions_are_independent() -> None:
    tracker = OffsetTracker()
    tracker.fetched(P0, 0)
    tracker.fetched(P1, 10)
    tracker.handled(P1, 10)
    assert sorted(tracker.to_commit()) == [("runs.ready", 0, 0), ("runs.ready", 1, 11)]
    assert tracker.unhandled() == 1


def test_only_selected_partitions() -> None:
    tracker = OffsetTracker()
    for part in (P0, P1):
        tracker.fetched(part, 3)
        tracker.handled(part, 3)
    assert tracker.to_commit([P1]) == [("runs.ready", 1, 4)]
    assert tracker.to_commit() == [("runs.ready", 0, 4)]


def test_forgotten_partitions_ignore_late_results() -> None:
    tracker = OffsetTracker()
    tracker.fetched(P0, 1)
    tracker.forget([P0])
    tracker.handled(P0, 1)  # the attempt finished after a rebalance took the partition
    assert tracker.to_commit() == []
    assert tracker.unhandled() == 0


def test_a_refetched_offset_is_tracked_once() -> None:
    tracker = OffsetTracker()
    tracker.fetched(P0, 4)
    tracker.fetched(P0, 4)
    tracker.handled(P0, 4)
    assert tracker.to_commit() == [("runs.ready", 0, 5)]
