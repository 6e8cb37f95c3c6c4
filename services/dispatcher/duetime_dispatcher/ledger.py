"""In-order acknowledgement per partition: the committed offset never passes a held run.

The dispatcher holds a run from the moment it reads it until its due instant, which can be an hour.
Kafka keeps one committed offset per partition, so a record may only count as done when every
record before it on its partition is done too; otherwise a crash would skip the held run.

faust tracks acked offsets itself, but its bookkeeping only protects contiguous acks: it commits
past an unacked offset when the partition has no committed offset yet, or when the hole is exactly
at the committed position (``Consumer._new_offset`` in faust-streaming 0.15.3 compares
``min(acked) - committed > 1`` where the committed offset is already the *next* offset). So the
dispatcher never acks out of order: this ledger hands back tokens (faust events) only for the
settled prefix of each partition, and faust then only ever sees contiguous acks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Claim", "OffsetLedger", "Partition"]

T = TypeVar("T")

#: (topic, partition number)
Partition = tuple[str, int]


@dataclass(eq=False, slots=True)
class Claim(Generic[T]):
    """One record's place in its partition's queue; settle it when its work is done."""

    partition: Partition
    offset: int
    token: T
    settled: bool = False
    # Set when the partition was revoked: the record will be read again by whoever owns the
    # partition next, so settling this claim must not ack anything.
    dropped: bool = False


class OffsetLedger(Generic[T]):
    """Records in offset order per partition; releases tokens only for the settled prefix."""

    def __init__(self) -> None:
        self._queues: dict[Partition, deque[Claim[T]]] = {}
        self._last_offset: dict[Partition, int] = {}
        self._settled_waiting = 0

    def track(self, partition: Partition, offset: int, token: T) -> Claim[T] | None:
        """Queue a record read from ``partition``. Records must come in offset order.

        Returns None for an offset at or below one already tracked: the consumer went back (a
        seek after an error), and that record is already held or done, so it needs no work.
        """
        last = self._last_offset.get(partition)
        if last is not None and offset <= last:
            return None
        self._last_offset[partition] = offset
        claim = Claim(partition, offset, token)
        self._queues.setdefault(partition, deque()).append(claim)
        return claim

    def settle(self, claim: Claim[T]) -> None:
        """Mark the record done; it becomes ackable once everything before it is."""
        if not claim.settled and not claim.dropped:
            claim.settled = True
            self._settled_waiting += 1

    def ackable(self) -> list[T]:
        """Pop and return the tokens of each partition's settled prefix, in offset order."""
        if not self._settled_waiting:
            return []
        tokens: list[T] = []
        for queue in self._queues.values():
            while queue and queue[0].settled:
                tokens.append(queue.popleft().token)
        self._settled_waiting -= len(tokens)
        return tokens

    def drop(self, partitions: Iterable[Partition]) -> int:
        """Forget revoked partitions; returns how many unacked records were dropped."""
        dropped = 0
        for partition in partitions:
            self._last_offset.pop(partition, None)
            queue = self._queues.pop(partition, None)
            for claim in queue or ():
                if claim.settled:
                    self._settled_waiting -= 1
                claim.dropped = True
                dropped += 1
        return dropped

    def partitions(self) -> set[Partition]:
        return set(self._queues)

    def oldest_unacked(self, partition: Partition) -> int | None:
        """The offset the partition's commit cannot pass (for stats), or None if nothing waits."""
        queue = self._queues.get(partition)
        return queue[0].offset if queue else None

    def __len__(self) -> int:
        """Records read but not yet acked."""
        return sum(len(queue) for queue in self._queues.values())
