"""The runs.ready consumer: take only as many records as there are free slots; commit safely.

Runs on its own thread, because every confluent-kafka consumer call blocks and librdkafka expects
one thread to drive a consumer. The loop:

- **Backpressure.** Records wait for a free execution slot in a local queue, in order, bounded
  by the slot count. When it is full the consumer takes nothing more and waits for a slot;
  librdkafka's own fetched queue keeps the next records at hand. Only if every slot stays busy
  for 10 s does it pause the assigned partitions and keep polling (short polls return nothing), so
  the group membership stays alive (``max.poll.interval.ms``) however long the attempts take; it
  resumes when the queue is half empty. Pausing drops librdkafka's fetched queue, which is why it
  is not done for every full moment.
- **At-least-once commits.** An offset is committed only once its attempt is handled, and only up
  to the first unhandled offset of its partition (``OffsetTracker``). A crash re-delivers from
  there; the claim compare-and-set turns the repeats into ``run.claim_skipped``.
- **Poison records.** A record that does not decode, or decodes into an impossible run, is logged
  as ``run.undecodable`` and committed past. It never stops the consumer.
- **Rebalances.** Handled offsets of revoked partitions are committed synchronously before they
  go; attempts still running for them finish, but their results no longer move any offset.
- **Shutdown.** ``stop_fetching`` stops taking records; the loop keeps polling and committing
  while in-flight attempts finish, until ``drained`` is set; then a final synchronous commit and
  ``close()`` leave the group cleanly so the partitions move at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from duetime.bus.run_headers import read_release
from duetime.errors import CodecError
from duetime.model import RunEvent

from .decoding import RunDecoder
from .logs import event
from .offsets import OffsetTracker, Partition

__all__ = ["Fetched", "ReadyConsumer", "Slots"]

_PAUSED_POLL = 0.05
# How long every slot may stay busy before the partitions are paused (well inside the consumer's
# max.poll.interval.ms, 300 s by default).
_PAUSE_AFTER = 10.0


@dataclass(frozen=True)
class Fetched:
    """A decoded run and where it came from (for the commit)."""

    run: RunEvent
    partition: Partition
    offset: int
    released_at: datetime | None = None  # the dispatcher's stamps (duetime-released-at-ms ...)
    throttled_ms: int | None = None


class Slots:
    """Execution slots shared by the consumer thread (takes) and the event loop (releases)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)

    def free(self) -> int:
        with self._lock:
            return self.capacity - self._used

    def take(self) -> None:
        with self._lock:
            self._used += 1

    def release(self) -> None:
        with self._lock:
            self._used -= 1
            self._freed.notify_all()

    def wait_free(self, timeout: float) -> bool:
        """Block until a slot is free (True) or ``timeout`` seconds pass (False)."""
        with self._lock:
            return self._freed.wait_for(lambda: self._used < self.capacity, timeout)

    def in_use(self) -> int:
        with self._lock:
            return self._used


class ReadyConsumer:
    """Drives one confluent-kafka consumer on the calling thread (see the module docstring)."""

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        *,
        slots: Slots,
        tracker: OffsetTracker,
        submit: Callable[[list[Fetched]], None],
        poll_timeout: float,
        assigned: threading.Event | None = None,
        pause_after: float = _PAUSE_AFTER,
    ) -> None:
        self._consumer = consumer
        self._topic = topic
        self._decoder = RunDecoder()
        self._slots = slots
        self._tracker = tracker
        self._submit = submit
        self._poll_timeout = poll_timeout
        self._waiting: deque[Fetched] = deque()
        # Records given a slot during the current step, handed over in one call at its end so
        # that the event loop claims them in one statement.
        self._outbox: list[Fetched] = []
        # Records fetched ahead of free slots: enough to refill every slot once without a fetch.
        self._prefetch = max(1, slots.capacity)
        self._full_since = 0.0
        self._pause_after = pause_after
        self._paused = False
        self._assignment_changed = False
        self.stop_fetching = threading.Event()
        self.drained = threading.Event()
        # Set on the first assignment: the worker is part of the group (tests wait on it).
        self.assigned = assigned or threading.Event()

    # the loop -----------------------------------------------------------------------------
    def run(self) -> None:
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        try:
            while not self.stop_fetching.is_set():
                self._step()
            self._pause()
            while not self.drained.is_set():
                self._consumer.poll(_PAUSED_POLL)  # keeps the membership; records are re-read
                self._commit(asynchronous=True)
        finally:
            self._commit(asynchronous=False)
            self._consumer.close()

    def _step(self) -> None:
        while self._waiting and self._slots.free() > 0:
            self._dispatch(self._waiting.popleft())
        room = self._prefetch - len(self._waiting)
        if room <= 0:
            # Buffer full. Stop taking records but leave librdkafka's fetched queue alone: a pause
            # drops it, and on a busy partition every resume costs a fetch. Only when the slots
            # stay busy for long (slow targets) does it pause, to keep the group membership alive.
            now = time.monotonic()
            self._full_since = self._full_since or now
            if not self._paused and now - self._full_since < self._pause_after:
                self._slots.wait_free(_PAUSED_POLL)
            else:
                self._pause()
                message = self._consumer.poll(_PAUSED_POLL)
                if message is not None:
                    self._accept(message)
        else:
            self._full_since = 0.0
            if self._paused and len(self._waiting) <= self._prefetch // 2:
                self._resume()
            if self._paused:
                message = self._consumer.poll(_PAUSED_POLL)
                if message is not None:
                    self._accept(message)
            else:
                # Short waits while runs are queued for a slot, so a freed slot is refilled fast.
                wait = _PAUSED_POLL if self._waiting else self._poll_timeout
                for message in self._consumer.consume(room, wait):
                    self._accept(message)
        self._hand_over()
        self._commit(asynchronous=True)

    def _accept(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                event("consumer.error", logging.WARNING, error=str(error))
            return
        topic, index, offset = message.topic(), message.partition(), message.offset()
        if topic is None or index is None or offset is None:
            return  # not a record (librdkafka only returns these with an error set)
        partition: Partition = (topic, index)
        self._tracker.fetched(partition, offset)
        headers = _headers(message)
        try:
            run = self._decoder.decode(message.value(), headers)
        except CodecError as exc:
            event(
                "run.undecodable",
                logging.ERROR,
                topic=partition[0],
                partition=partition[1],
                offset=offset,
                error=str(exc),
            )
            self._tracker.handled(partition, offset)
            return
        released_at, throttled_ms = read_release(headers)
        fetched = Fetched(run, partition, offset, released_at, throttled_ms)
        if self._slots.free() > 0 and not self._waiting:
            self._dispatch(fetched)
        else:
            self._waiting.append(fetched)

    def _dispatch(self, fetched: Fetched) -> None:
        self._slots.take()
        self._outbox.append(fetched)

    def _hand_over(self) -> None:
        if self._outbox:
            batch, self._outbox = self._outbox, []
            self._submit(batch)

    # pause / resume -------------------------------------------------------------------------
    def _pause(self) -> None:
        if self._paused and not self._assignment_changed:
            return
        self._consumer.pause(self._consumer.assignment())
        self._paused = True
        self._assignment_changed = False

    def _resume(self) -> None:
        if not self._paused:
            return
        self._consumer.resume(self._consumer.assignment())
        self._paused = False

    # commits and rebalances -------------------------------------------------------------------
    def _commit(self, *, asynchronous: bool, only: Sequence[Partition] | None = None) -> None:
        positions = self._tracker.to_commit(only)
        if not positions:
            return
        offsets = [TopicPartition(t, p, o) for t, p, o in positions]
        try:
            if asynchronous:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the records are re-delivered and their claims skip.
            event("consumer.commit_failed", logging.WARNING, error=str(exc))

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._assignment_changed = True
        self.assigned.set()
        event("consumer.assigned", partitions=_names(partitions))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._commit(asynchronous=False, only=keys)
        self._forget(keys)
        event("consumer.revoked", partitions=_names(partitions))

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._forget([(tp.topic, tp.partition) for tp in partitions])
        event("consumer.lost", logging.WARNING, partitions=_names(partitions))

    def _forget(self, keys: list[Partition]) -> None:
        self._tracker.forget(keys)
        gone = set(keys)
        self._waiting = deque(f for f in self._waiting if f.partition not in gone)


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    raw = message.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode("utf-8") if isinstance(v, str) else v) for k, v in items]


def _names(partitions: list[TopicPartition]) -> str:
    return ",".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "-"
