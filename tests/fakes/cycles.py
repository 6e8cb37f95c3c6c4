"""Reference cycles for tests of the garbage-collection policies (duetime/collector.py,
duetime_dispatcher/heap.py): only the cyclic collector frees them."""

from __future__ import annotations

import weakref

__all__ = ["Node", "garbage_cycle"]


class Node:
    other: Node | None = None


def garbage_cycle() -> weakref.ref[Node]:
    """A garbage cycle, known by a weak reference (dead once a collection freed it)."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)
