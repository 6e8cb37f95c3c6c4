"""The dispatcher's garbage-collection policy (duetime_dispatcher.heap), on a fake clock."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from duetime_dispatcher.heap import Heap
from tests.fakes.clock import ManualClock
from tests.fakes.cycles import garbage_cycle


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    yield ManualClock()
    gc.unfreeze()  # whatever a test froze goes back to the collector


def test_a_frozen_garbage_cycle_waits_for_the_full_pass(clock: ManualClock) -> None:
    heap = Heap(every=600, at_least_every=3600, quiet_for=1.0, monotonic=clock)
    gc.collect()
    cycle = garbage_cycle()
    heap.freeze()
    gc.collect()  # the collections leave frozen objects alone
    assert cycle() is not None
    clock.now += 600
    full = heap.maybe_collect(next_due_in=None)
    assert full is not None and full.unreachable >= 2 and not full.forced
    assert full.frozen >= 2
    assert cycle() is None
    assert gc.get_freeze_count() == 0


def test_the_full_pass_waits_for_a_quiet_moment_then_is_forced(clock: ManualClock) -> None:
    heap = Heap(every=600, at_least_every=3600, quiet_for=1.0, monotonic=clock)
    clock.now += 599
    assert heap.maybe_collect(next_due_in=None) is None  # not yet time
    clock.now += 1
    assert heap.maybe_collect(next_due_in=0.2) is None  # a run is due within a second
    assert heap.maybe_collect(next_due_in=1.5) is not None  # nothing due soon: now
    clock.now += 600
    assert heap.maybe_collect(next_due_in=0.0) is None
    clock.now += 3000  # an hour since the last pass: whatever is due
    full = heap.maybe_collect(next_due_in=0.0)
    assert full is not None and full.forced
    assert heap.maybe_collect(next_due_in=None) is None  # the clock starts again
