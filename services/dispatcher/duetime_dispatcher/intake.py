"""The due topics' consumer: records in batches straight from librdkafka, commits of acked prefixes.

The dispatcher reads every run once, at intake, and a steady load is read as fast as it is
released, so the cost per record of reading is the dispatcher's ceiling. faust's agent made an
event per record (aiokafka's fetcher, faust's message, conductor, stream and take buffer): about
45 us of the event loop's time per run, a third of the dispatcher's whole per-run cost. This
consumer takes a batch of records from librdkafka's prefetched queue in one call
(``consume(n, 0)``, a few microseconds a record) and hands them to the dispatcher as they are.

Everything happens on the event loop's thread: ``consume`` is called with a zero timeout, so it
never blocks (librdkafka fetches on its own threads ahead of it), and the rebalance callbacks it
serves run on the loop too, so dropping a revoked partition's held runs needs no locking. An idle
intake polls every ``idle_poll``.

Offsets: the dispatcher acks records only as a settled prefix of their partition
(:mod:`duetime_dispatcher.ledger`); :meth:`IntakeConsumer.ack` moves the partition's commit
position past them, and :meth:`IntakeConsumer.commit` sends the positions that moved (every
``commit_interval``, asynchronously). A revoked partition's position is committed synchronously
before it goes, so its next owner starts after what was released here. librdkafka puts the
group generation on every commit, so a process that lost its partitions (a zombie after a pause)
cannot move their offsets.

Back-pressure: at the held cap the dispatcher pauses every assigned partition and keeps polling
(``consume`` then returns nothing but still serves rebalances and keeps the member inside
``max.poll.interval.ms``). librdkafka drops a paused partition's fetched queue and fetches again
from the position after the last record handed out, so nothing is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from duetime.bus.kafka import commit_offsets, consumer_config
from duetime.config import Settings
from duetime.logs import event as log_event

from .ledger import Partition

__all__ = ["IntakeConsumer", "Rebalance"]

log = logging.getLogger("duetime.dispatcher")

#: Called with the partitions assigned, revoked or lost.
Rebalance = Callable[[list[Partition]], None]


class IntakeConsumer:
    """One confluent-kafka consumer of the due topics in the dispatcher's group.

    Args:
        settings: where the broker is.
        group_id: the dispatcher group (``<prefix>dispatcher``).
        topics: the due topics.
        on_assigned: called (on the loop) with partitions this process now owns.
        on_revoked: called (on the loop) with partitions that are going, after their acked
            position was committed; the dispatcher drops what it held of them.
    """

    def __init__(
        self,
        settings: Settings,
        group_id: str,
        topics: Sequence[str],
        *,
        on_assigned: Rebalance,
        on_revoked: Rebalance,
    ) -> None:
        self._consumer = Consumer(
            consumer_config(
                settings,
                group_id,
                # Fetch ahead in large chunks: a planner publishes a midnight in bursts.
                **{"queued.max.messages.kbytes": 262_144, "fetch.max.bytes": 52_428_800},
            )
        )
        self._topics = list(topics)
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._positions: dict[Partition, int] = {}  # next offset to commit, per partition
        self._moved: set[Partition] = set()  # positions not yet sent
        self._assigned: set[Partition] = set()
        self._paused = False
        self._closed = False
        self.errors = 0  # error events returned by consume (logged)

    def subscribe(self) -> None:
        self._consumer.subscribe(
            self._topics,
            on_assign=self._assign_cb,
            on_revoke=self._revoke_cb,
            on_lost=self._lost_cb,
        )

    @property
    def assigned(self) -> set[Partition]:
        return self._assigned

    # -- reading -------------------------------------------------------------------------------

    def poll(self, max_records: int) -> list[Message]:
        """Up to ``max_records`` records already fetched; never blocks. Error events are logged
        and left out (librdkafka retries by itself)."""
        messages: list[Message] = self._consumer.consume(max_records, 0)
        if not messages:
            return messages
        for message in messages:
            if message.error() is not None:
                return self._without_errors(messages)
        return messages

    def _without_errors(self, messages: list[Message]) -> list[Message]:
        kept: list[Message] = []
        for message in messages:
            error = message.error()
            if error is None:
                kept.append(message)
            elif error.code() != KafkaError._PARTITION_EOF:
                self.errors += 1
                log_event(log, "intake.error", logging.WARNING, reason=str(error))
        return kept

    def pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._set_paused(self._assigned, True)

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._set_paused(self._assigned, False)

    def _set_paused(self, partitions: Iterable[Partition], paused: bool) -> None:
        tps = [TopicPartition(topic, number) for topic, number in partitions]
        if not tps:
            return
        try:
            if paused:
                self._consumer.pause(tps)
            else:
                self._consumer.resume(tps)
        except KafkaException as exc:  # a partition revoked meanwhile: the next assign decides
            log_event(log, "intake.pause_failed", logging.WARNING, reason=str(exc))

    # -- offsets -------------------------------------------------------------------------------

    def ack(self, partition: Partition, offset: int) -> None:
        """Everything up to ``offset`` on ``partition`` is done (acks come in offset order)."""
        if partition in self._assigned:
            self._positions[partition] = offset + 1
            self._moved.add(partition)

    def commit(self, *, asynchronous: bool = True, only: Iterable[Partition] | None = None) -> int:
        """Send the positions that moved (of ``only``, if given); returns how many were sent."""
        wanted = self._moved if only is None else self._moved.intersection(only)
        if not wanted or self._closed:
            return 0
        offsets = [TopicPartition(t, p, self._positions[(t, p)]) for t, p in wanted]
        try:
            commit_offsets(self._consumer, offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            # Not fatal: the positions stay moved and go with the next commit; a crash before
            # then replays records already released, which de-duplication downstream absorbs.
            code = exc.args[0].code() if exc.args else None
            if code != KafkaError._NO_OFFSET:
                log_event(log, "intake.commit_failed", logging.WARNING, reason=str(exc))
            return 0
        self._moved.difference_update(wanted)
        return len(offsets)

    # -- rebalances ----------------------------------------------------------------------------

    def _assign_cb(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._assigned.update(keys)
        if self._paused:
            # librdkafka assigns after this callback returns; pause the new ones right away so
            # a paused intake stays paused (incremental assign keeps earlier pauses).
            consumer.incremental_assign(partitions)
            self._set_paused(keys, True)
        self._on_assigned(keys)

    def _revoke_cb(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.commit(asynchronous=False, only=keys)
        self._forget(keys)
        self._on_revoked(keys)

    def _lost_cb(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: another member may own them already, so no commit.
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._forget(keys)
        log_event(log, "partitions.lost", logging.WARNING, count=len(keys))
        self._on_revoked(keys)

    def _forget(self, keys: list[Partition]) -> None:
        for key in keys:
            self._assigned.discard(key)
            self._positions.pop(key, None)
            self._moved.discard(key)

    def close(self) -> None:
        """Commit what moved, then leave the group so the partitions move at once."""
        if self._closed:
            return
        self.commit(asynchronous=False)
        self._closed = True
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log_event(log, "intake.close_failed", logging.WARNING, reason=str(exc))
