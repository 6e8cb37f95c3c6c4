"""A hierarchical timing wheel: hold many items until their due instant, release them in order.

The dispatcher holds every run published ahead of its due time (up to 100M pending, spikes of 100k
due in the same second) and must release each at its ``due_at``. A heap costs ``O(log n)`` per
insert with a large constant; a hierarchical wheel (Varghese & Lauck; the Linux kernel timers;
Kafka's purgatory) costs ``O(1)`` per insert and per cascade, and an idle wheel costs nothing.

Layout. Time is cut into ticks of ``tick`` (10 ms by default), numbered from the Unix epoch so
the wheel needs no origin. Level ``L`` has ``slots`` slots (256 by default), each covering
``slots**L`` ticks; with four levels the wheel reaches ``256**4`` ticks (~497 days at 10 ms).
An item goes to the lowest level whose span, counted from the current tick, still contains its
due tick; anything further out waits in an overflow heap. When the current tick enters a slot's
span, the slot *cascades*: its items are re-inserted one level lower, until they reach level 0
and, at their tick, the ready heap.

Exactness. Slots only know ticks, so an item whose tick has come moves to a small ready heap
ordered by its exact ``due_at``; ``advance(now)`` releases from it only what is due at ``now``.
So an item is never released before its due instant, and is released by the first ``advance``
at or after it, whatever the tick size.

The spike. A level-0 slot holds every item of its tick: at midnight, 100k of them. Its drain is
the work done *at* the due instant, so it is kept to one sort of an almost sorted list (its items
arrive in order of addition) into a sorted *batch*, released by slicing; the ready heap takes
only what is added already due, and the two are merged by ``(due, order of addition)``. And it
can be done ahead of time: ``advance(now, prepare=lead)`` cascades and sorts everything due up to
``now + lead`` (the batch grows by appending, as later ticks sort after earlier ones) while still
releasing only what is due at ``now``. A caller that wakes at ``next_due(prepare=lead)`` does the
work of a midnight spike ``lead`` before midnight, and at midnight only slices a sorted list.

The wheel is pure: it never reads a clock. Callers pass ``now`` (aware datetimes). Time must not
go backwards; if a caller's ``now`` does, the wheel keeps the latest ``now`` it has seen.

Keys de-duplicate: adding a key already held is a no-op, which is how the dispatcher drops a
second copy of the same ``(run_id, attempt)``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Generic, TypeVar

__all__ = ["TimingWheel"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_ORDER = attrgetter("due_us", "seq")
_DUE = attrgetter("due_us")


def _to_us(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("the timing wheel needs aware datetimes (UTC), not naive ones")
    return (instant - _EPOCH) // _MICROSECOND


def _from_us(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


@dataclass(eq=False, slots=True)
class _Entry(Generic[K, V]):
    key: K
    due_us: int
    tick: int
    seq: int
    item: V
    # The slot (a dict keyed by key) holding the entry, so remove() is O(1); None when the entry
    # sits in the ready or overflow heap, where removal is lazy (the ``removed`` flag).
    slot: dict[K, _Entry[K, V]] | None = None
    level: int = -1
    removed: bool = False


@dataclass(slots=True)
class _Level(Generic[K, V]):
    slots: list[dict[K, _Entry[K, V]]]
    # Bit i set <=> slots[i] is not empty: finding the next busy slot is a few integer operations
    # instead of a scan, which keeps long idle stretches cheap to skip.
    occupied: int = 0


class TimingWheel(Generic[K, V]):
    """Items keyed by ``K``, each with a due instant, released by :meth:`advance` in due order.

    Args:
        start_at: the instant the wheel starts at; items due at or before it are already due.
        tick: the resolution of the slots. It bounds the work per advance, not the precision:
            release is exact to the microsecond.
        slots: slots per level, a power of two.
        levels: how many levels before the overflow heap.
    """

    def __init__(
        self,
        start_at: datetime,
        *,
        tick: timedelta = timedelta(milliseconds=10),
        slots: int = 256,
        levels: int = 4,
    ) -> None:
        if slots < 2 or slots & (slots - 1):
            raise ValueError("slots must be a power of two and at least 2")
        if levels < 1:
            raise ValueError("levels must be at least 1")
        self._tick_us = tick // _MICROSECOND
        if self._tick_us < 1:
            raise ValueError("tick must be at least one microsecond")
        self._bits = slots.bit_length() - 1
        self._mask = slots - 1
        self._levels: list[_Level[K, V]] = [
            _Level([{} for _ in range(slots)]) for _ in range(levels)
        ]
        self._now_us = _to_us(start_at)
        self._current = self._now_us // self._tick_us
        self._index: dict[K, _Entry[K, V]] = {}
        # (due_us, seq, entry): exact order among items whose tick has come.
        self._ready: list[tuple[int, int, _Entry[K, V]]] = []
        # The last drained level-0 slot, sorted by (due_us, seq); released from ``_batch_head``.
        self._batch: list[_Entry[K, V]] = []
        self._batch_head = 0
        # (tick, seq, entry): items beyond the top level's reach.
        self._overflow: list[tuple[int, int, _Entry[K, V]]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[K]:
        """The keys held, in no particular order."""
        return iter(list(self._index))

    def get(self, key: K) -> V | None:
        entry = self._index.get(key)
        return None if entry is None else entry.item

    def add(self, key: K, due_at: datetime, item: V) -> bool:
        """Hold ``item`` until ``due_at``. Returns False (and changes nothing) if ``key`` is held.

        An item already due (``due_at`` at or before the last ``now``) is released by the next
        :meth:`advance`.
        """
        if key in self._index:
            return False
        due_us = _to_us(due_at)
        self._seq += 1
        entry = _Entry(key, due_us, due_us // self._tick_us, self._seq, item)
        self._index[key] = entry
        self._place(entry)
        return True

    def remove(self, key: K) -> V | None:
        """Stop holding ``key``; returns its item, or None if it was not held."""
        entry = self._index.pop(key, None)
        if entry is None:
            return None
        entry.removed = True
        if entry.slot is not None:
            del entry.slot[key]
            self._update_occupancy(entry.level, entry.slot, entry.tick)
            entry.slot = None
        return entry.item

    def furthest(self, count: int) -> list[K]:
        """The keys of the ``count`` items due last (latest first; ties: the last added first).

        O(n log count) over everything held: for rare decisions such as shedding load, never for
        the per-item path.
        """
        if count <= 0:
            return []
        entries = heapq.nlargest(
            count, self._index.values(), key=lambda entry: (entry.due_us, entry.seq)
        )
        return [entry.key for entry in entries]

    def next_due(
        self, prepare: timedelta = timedelta(0), ahead: timedelta = timedelta(0)
    ) -> datetime | None:
        """When :meth:`advance` (with the same ``prepare``) should next be called, or None if
        the wheel is empty; with ``ahead`` (at most ``prepare``), when :meth:`take_ahead` should
        next be called to take items ``ahead`` of their due instant.

        Never later than the earliest ``due_at`` held (less ``ahead``), so sleeping until it
        never oversleeps. It is exact for items whose tick has come; for the others it is the
        start of the tick (or of the slot's span) that holds the earliest, because finding the
        exact instant would mean scanning a slot that may hold a whole spike; less ``prepare``,
        when the work of that tick is to be done ahead. ``ahead`` moves only the first: a tick
        is worked ``prepare`` ahead, so its items are ready before anyone wants them ``ahead``,
        and a caller woken ``ahead`` before a tick's start would find nothing to do there and
        be woken again at once until the tick's work came due.
        """
        if not self._index:
            return None
        self._drop_removed_ready()
        first = self._first_ready()
        first_us = None if first is None else first.due_us - ahead // _MICROSECOND
        event = self._next_event_tick()
        if event is None:  # nothing in the slots or in the overflow heap
            return None if first_us is None else _from_us(first_us)
        event_us = event * self._tick_us - prepare // _MICROSECOND
        return _from_us(event_us if first_us is None else min(first_us, event_us))

    def advance(self, now: datetime, prepare: timedelta = timedelta(0)) -> list[V]:
        """Release every item due at or before ``now``, in order of due instant (ties: in order
        of addition), and stop holding them. With ``prepare``, also do the work for the items
        due up to ``now + prepare`` (they stay held, and are released by a later call)."""
        return [entry.item for entry in self._advance(now, prepare)]

    def take_ahead(
        self, now: datetime, until: datetime, prepare: timedelta = timedelta(0)
    ) -> tuple[list[int], list[V]]:
        """Stop holding every item due up to ``until`` (at most ``now + prepare``) *before* it
        is due, for a caller that keeps it and releases it itself at its instant. Returns the
        due instants (microseconds since the Unix epoch) and the items, in due order.

        Unlike ``advance(until)``, the wheel's ``now`` stays ``now``: an item added later and
        due before ``until`` is released by the ``advance`` at its own instant, not early."""
        if until > now + prepare:
            raise ValueError("take_ahead reaches at most now + prepare")
        entries = self._advance(now, prepare)  # what is due already comes first
        entries += self._release(max(self._now_us, _to_us(until)))
        return [entry.due_us for entry in entries], [entry.item for entry in entries]

    # -- internals -------------------------------------------------------------------------

    def _advance(self, now: datetime, prepare: timedelta) -> list[_Entry[K, V]]:
        now_us = _to_us(now)
        if now_us > self._now_us:
            self._now_us = now_us
        # The slots are worked up to ``now + prepare``; only what is due at ``now`` is released.
        target = (self._now_us + prepare // _MICROSECOND) // self._tick_us
        while self._current < target:
            event = self._next_event_tick()
            if event is None or event > target:
                self._current = target
                break
            self._current = event
            self._arrive()
        return self._release(self._now_us)

    def _place(self, entry: _Entry[K, V]) -> None:
        """Put ``entry`` at the lowest level whose span from the current tick contains it."""
        tick, current, bits = entry.tick, self._current, self._bits
        if tick <= current:
            entry.slot, entry.level = None, -1
            heapq.heappush(self._ready, (entry.due_us, entry.seq, entry))
            return
        for number, level in enumerate(self._levels):
            shift = bits * (number + 1)
            if tick >> shift == current >> shift:
                index = (tick >> (bits * number)) & self._mask
                slot = level.slots[index]
                slot[entry.key] = entry
                entry.slot, entry.level = slot, number
                level.occupied |= 1 << index
                return
        entry.slot, entry.level = None, -1
        heapq.heappush(self._overflow, (tick, entry.seq, entry))

    def _update_occupancy(self, number: int, slot: dict[K, _Entry[K, V]], tick: int) -> None:
        if not slot:
            index = (tick >> (self._bits * number)) & self._mask
            self._levels[number].occupied &= ~(1 << index)

    def _next_event_tick(self) -> int | None:
        """The first tick after the current one at which a slot cascades or drains."""
        current, bits = self._current, self._bits
        best: int | None = None
        for number, level in enumerate(self._levels):
            if not level.occupied:
                continue
            index = (current >> (bits * number)) & self._mask
            above = level.occupied >> (index + 1)
            if not above:
                continue
            slot = index + 1 + ((above & -above).bit_length() - 1)
            span = bits * (number + 1)
            start = ((current >> span) << span) | (slot << (bits * number))
            if best is None or start < best:
                best = start
            # Lower levels hold earlier ticks than higher ones, so the first busy level decides.
            break
        while self._overflow and self._overflow[0][2].removed:
            heapq.heappop(self._overflow)
        if self._overflow and best is None:
            top = bits * len(self._levels)
            best = max(current + 1, (self._overflow[0][0] >> top) << top)
        return best

    def _arrive(self) -> None:
        """The current tick just moved: cascade the spans that start here, drain level 0."""
        current, bits = self._current, self._bits
        top = bits * len(self._levels)
        if current & ((1 << top) - 1) == 0:
            while self._overflow and self._overflow[0][0] >> top <= current >> top:
                entry = heapq.heappop(self._overflow)[2]
                if not entry.removed:
                    self._place(entry)
        for number in range(len(self._levels) - 1, -1, -1):
            shift = bits * number
            if current & ((1 << shift) - 1):
                continue
            level = self._levels[number]
            index = (current >> shift) & self._mask
            slot = level.slots[index]
            if not slot:
                continue
            entries = list(slot.values())
            slot.clear()
            level.occupied &= ~(1 << index)
            if number == 0:
                # Every entry of a level-0 slot is due in this tick (a spike is tens of
                # thousands in one slot): one sort, no heap.
                for entry in entries:
                    entry.slot, entry.level = None, -1
                self._to_batch(entries)
                continue
            for entry in entries:
                self._place(entry)

    def _to_batch(self, entries: list[_Entry[K, V]]) -> None:
        # Slots drain in tick order, so every entry here sorts after the whole batch.
        entries.sort(key=_ORDER)
        batch, head = self._batch, self._batch_head
        if head >= len(batch):
            self._batch, self._batch_head = entries, 0
        elif head > len(batch) // 2:
            self._batch, self._batch_head = batch[head:] + entries, 0
        else:
            batch.extend(entries)

    def _drop_removed_ready(self) -> None:
        while self._ready and self._ready[0][2].removed:
            heapq.heappop(self._ready)
        batch, head = self._batch, self._batch_head
        while head < len(batch) and batch[head].removed:
            head += 1
        self._batch_head = head

    def _first_ready(self) -> _Entry[K, V] | None:
        """The earliest entry whose tick has come (after ``_drop_removed_ready``)."""
        heap_first = self._ready[0][2] if self._ready else None
        batch_first = self._batch[self._batch_head] if self._batch_head < len(self._batch) else None
        if heap_first is None or batch_first is None:
            return heap_first or batch_first
        return min(heap_first, batch_first, key=_ORDER)

    def _release(self, now_us: int) -> list[_Entry[K, V]]:
        ready, batch, head = self._ready, self._batch, self._batch_head
        entries: list[_Entry[K, V]] = []
        if head < len(batch):
            # The batch is sorted: what is due is a prefix, found by bisection, taken by a slice.
            cut = bisect_right(batch, now_us, lo=head, key=_DUE)
            if cut > head:
                entries = [entry for entry in batch[head:cut] if not entry.removed]
            if cut >= len(batch):
                self._batch, self._batch_head = [], 0
            elif cut > len(batch) // 2:
                self._batch, self._batch_head = batch[cut:], 0
            else:
                self._batch_head = cut
        if ready and ready[0][0] <= now_us:
            early: list[_Entry[K, V]] = []
            if len(ready) > 64 and max(due for due, _, _ in ready) <= now_us:
                # A spike added already due lands whole in the heap: one sort, not n pops.
                ready.sort()
                early = [entry for _, _, entry in ready if not entry.removed]
                ready.clear()
            while ready and ready[0][0] <= now_us:
                entry = heapq.heappop(ready)[2]
                if not entry.removed:
                    early.append(entry)
            entries = list(heapq.merge(early, entries, key=_ORDER)) if entries else early
        index = self._index
        for entry in entries:
            del index[entry.key]
            entry.removed = True
        return entries
