"""Which offset of each partition is safe to commit when attempts finish out of order.

Attempts run concurrently, so offset 7 may finish before offset 5. Committing 8 then would lose 5
and 6 if the worker crashed before they finished. The tracker commits, per partition, only up to
the first offset that is not handled yet: the classic "lowest unfinished offset" watermark. A
crash re-delivers everything from there; the claim compare-and-set makes the repeats harmless.

Thread-safe: the consumer thread adds and commits, the event loop marks attempts done.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["OffsetTracker", "Partition"]

Partition = tuple[str, int]


@dataclass
class _PartitionState:
    # Offsets handed to the application, in fetch order, mapped to "handled yet?".
    pending: dict[int, bool] = field(default_factory=dict)
    next_offset: int | None = None  # one past the last fetched offset
    committed: int | None = None  # the last position handed out for commit


class OffsetTracker:
    """Per-partition "handled up to here" positions for manual commits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[Partition, _PartitionState] = {}

    def fetched(self, partition: Partition, offset: int) -> None:
        """Record that ``offset`` was taken from the broker and is not handled yet."""
        with self._lock:
            state = self._parts.setdefault(partition, _PartitionState())
            state.pending.setdefault(offset, False)
            state.next_offset = max(state.next_offset or 0, offset + 1)

    def handled(self, partition: Partition, offset: int) -> None:
        """Record that ``offset``'s attempt is finished (or skipped); unknown offsets are ignored.

        Unknown offsets happen after a rebalance took the partition away (``forget``): the new
        owner has re-read from the last commit, so this result must not move anything.
        """
        with self._lock:
            state = self._parts.get(partition)
            if state is not None and offset in state.pending:
                pending = state.pending
                pending[offset] = True
                # Drop the handled prefix; what remains starts at the first unhandled offset.
                # (Walks the prefix only: copying the whole dict per call would be quadratic in
                # the number of attempts in flight.)
                while pending:
                    head = next(iter(pending))
                    if not pending[head]:
                        break
                    del pending[head]

    def _position(self, state: _PartitionState) -> int | None:
        if state.pending:
            return next(iter(state.pending))
        return state.next_offset

    def to_commit(
        self, partitions: Iterable[Partition] | None = None
    ) -> list[tuple[str, int, int]]:
        """(topic, partition, position) for every partition whose position moved since last time.

        The position is the offset of the next record to read, as Kafka commits expect. Calling
        this marks the positions as committed; the caller commits them.
        """
        with self._lock:
            wanted = self._parts.keys() if partitions is None else set(partitions)
            out: list[tuple[str, int, int]] = []
            for key in list(wanted):
                state = self._parts.get(key)
                if state is None:
                    continue
                position = self._position(state)
                if position is not None and position != state.committed:
                    state.committed = position
                    out.append((key[0], key[1], position))
            return out

    def forget(self, partitions: Iterable[Partition]) -> None:
        """Stop tracking partitions this consumer no longer owns (revoked or lost)."""
        with self._lock:
            for key in partitions:
                self._parts.pop(key, None)

    def unhandled(self) -> int:
        """How many fetched offsets are not handled yet (all partitions)."""
        with self._lock:
            return sum(1 for s in self._parts.values() for done in s.pending.values() if not done)
