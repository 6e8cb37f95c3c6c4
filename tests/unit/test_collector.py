"""duetime.collector: no automatic collection inside a paused block, collections as before
after it, and what start-up froze is left alone by later passes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from duetime.collector import collector_paused, freeze_startup, pause_collector, young_generation
from tests.fakes.cycles import Node, garbage_cycle


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


def _allocate(objects: int) -> list[list[None]]:
    """Tracked objects kept alive: only allocations that outlive a moment count towards a
    young collection (a freed one takes its count back)."""
    return [[] for _ in range(objects)]


def test_no_automatic_collection_inside_the_block_and_collections_resume_after() -> None:
    gc.enable()
    gc.collect()
    with collector_paused():
        assert not gc.isenabled()
        cycle = garbage_cycle()
        kept = _allocate(10 * gc.get_threshold()[0])  # many times what triggers a collection
        assert cycle() is not None
    assert gc.isenabled()
    kept += _allocate(2 * gc.get_threshold()[0])  # the first young collection after the block
    assert cycle() is None


def test_the_collector_comes_back_when_the_block_raises() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("round failed")
    assert gc.isenabled()


def test_a_collector_disabled_on_purpose_stays_disabled_and_nesting_keeps_the_outer_pause() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner block did not end the outer pause
    assert gc.isenabled()


def test_what_start_up_froze_is_left_out_of_later_collections() -> None:
    gc.enable()
    node = Node()
    node.other = Node()
    node.other.other = node  # a cycle alive at start-up, garbage later
    cycle = weakref.ref(node)
    frozen = freeze_startup()
    assert frozen >= 2
    assert gc.get_freeze_count() == frozen
    del node
    gc.collect()
    assert cycle() is not None  # frozen: no pass walks it
    gc.unfreeze()
    gc.collect()
    assert cycle() is None


def test_a_larger_young_generation_collects_only_after_its_own_count() -> None:
    gc.enable()
    gc.collect()
    middle, oldest = gc.get_threshold()[1:]
    young_generation(20_000)
    assert gc.get_threshold() == (20_000, middle, oldest)
    cycle = garbage_cycle()
    kept = _allocate(5_000)  # several default young generations' worth
    assert cycle() is not None
    kept += _allocate(20_000)
    assert cycle() is None
    assert kept


def test_a_pause_says_whether_it_turned_the_collector_off() -> None:
    gc.enable()
    try:
        assert pause_collector() is True and not gc.isenabled()
        assert pause_collector() is False and not gc.isenabled()  # off already: not ours
    finally:
        gc.enable()
