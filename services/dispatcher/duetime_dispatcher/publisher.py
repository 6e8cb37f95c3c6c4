"""Publish released runs to ``runs.ready`` (or, on the Kafka fast path, the job's own record to
the job's topic) and report which ones the broker acknowledged.

The record goes on as it was read: the same value bytes and the same headers (schema fingerprint
and routing) plus two stamps (``duetime-released-at-ms``, ``duetime-throttled-ms``: when it was
released, on the database clock, and how long throttling held it), keyed by ``run_id`` so that
one busy target spreads over every partition of ``runs.ready`` and every worker process
(throttling per target is the dispatcher's job, not the partitioner's). A release only counts
once the broker has it (``acks=all``); only then may the source record be acked.

At the due instant the produce calls run on the event loop, straight off the wheel (:meth:`send`);
the wait for the broker's answers runs in a worker thread (:meth:`settle`), so a broker that is
slow to answer, or a queue that is full, never blocks the loop that keeps consuming.

Delivery reports come for failures only (``delivery.report.only.error``): a spike's 100k success
callbacks, each a Python call under the GIL inside the flush, cost more than the produce calls
they report on. A release is acknowledged when the producer's queue is empty after a flush and
no failure was reported for it; a flush that times out leaves the round's releases pending, and
a later flush that empties the queue acknowledges them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from confluent_kafka import KafkaException, Producer

from duetime.bus.kafka import producer_config
from duetime.bus.run_headers import RELEASED_AT_MS, THROTTLED_MS, epoch_ms
from duetime.config import Settings

from .holding import Release

__all__ = ["Outcomes", "ReadyPublisher", "release_stamp"]

T = TypeVar("T")

#: (release, None) when the broker acknowledged it, (release, reason) when it refused it.
Outcomes = list[tuple[Release[T], str | None]]


def release_stamp(release: Release[Any]) -> list[tuple[str, bytes]]:
    """The headers saying when ``release`` left (taken off the wheel, plus any throttled wait)
    and how long throttling held it."""
    released_ms = epoch_ms(release.taken_at) + release.throttled_ms
    return [
        (RELEASED_AT_MS, str(released_ms).encode("ascii")),
        (THROTTLED_MS, str(release.throttled_ms).encode("ascii")),
    ]


class ReadyPublisher(Generic[T]):
    """One confluent-kafka producer forwarding due records to ``runs.ready``, keyed by run_id."""

    def __init__(self, producer: Producer, topic: str, flush_timeout: float) -> None:
        self._producer = producer
        self._topic = topic
        self._flush_timeout = flush_timeout
        # Failure reports, appended by librdkafka's callbacks. They run only inside poll() and
        # flush(), which only the publishing thread calls (one round at a time), so no lock.
        self._failures: list[tuple[Release[T], Any]] = []
        # Produced, neither reported failed nor known delivered (by id: releases are unhashable).
        self._pending: dict[int, Release[T]] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, topic: str, flush_timeout: float
    ) -> ReadyPublisher[T]:
        config = producer_config(settings, **{"delivery.report.only.error": True})
        return cls(Producer(config), topic, flush_timeout)

    def send(self, releases: Sequence[Release[T]]) -> list[Release[T]]:
        """Hand ``releases`` to librdkafka now, on the calling thread; returns those its queue
        had no room for, which :meth:`settle` produces once there is room.

        Called on the event loop at the due instant: a spike's produce calls are the only work
        between the wheel and the broker (a thread hop first, or the round's bookkeeping, would
        come before the first record leaves). It blocks the loop for the calls alone, a few
        microseconds each (~0.5 s for 100k runs); it never waits for the broker.
        """
        produce, topic = self._producer.produce, self._topic
        stamps: dict[tuple[datetime, int], list[tuple[str, bytes]]] = {}
        pending, failures = self._pending, self._failures
        sent = 0
        try:
            for release in releases:
                routed = release.routed
                emission = routed.emission
                pending[id(release)] = release
                release.failures = failures  # the release is its own delivery callback
                try:
                    if emission is None:
                        # When it was released and how long throttling held it, for the worker's
                        # claim to record (one pair per round and wait: releases share them).
                        stamp_key = (release.taken_at, release.throttled_ms)
                        stamp = stamps.get(stamp_key)
                        if stamp is None:
                            stamp = stamps[stamp_key] = release_stamp(release)
                        produce(
                            topic,
                            routed.value,
                            routed.ready_key,
                            headers=cast(Any, [*routed.headers, *stamp]),
                            on_delivery=release,
                        )
                    else:  # the Kafka fast path: the job's own record on the job's own topic
                        produce(
                            emission.topic,
                            emission.value,
                            emission.key,
                            headers=cast(Any, emission.headers),
                            on_delivery=release,
                        )
                except KafkaException as exc:  # refused by the client itself (its size limit)
                    release(exc.args[0], None)
                sent += 1
        except BufferError:  # the queue is full: the rest waits for room, off the loop
            return list(releases[sent:])
        return []

    async def settle(self, unsent: Sequence[Release[T]] = ()) -> Outcomes[T]:
        """Produce ``unsent`` (what :meth:`send` left), then wait for the broker's answers (at
        most ``flush_timeout``), in a worker thread: a broker slow to answer never blocks the
        event loop. Returns the outcome of every release sent so far that is now known."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._settle_blocking, unsent)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._producer.flush, self._flush_timeout)

    def _settle_blocking(self, unsent: Sequence[Release[T]]) -> Outcomes[T]:
        for release in unsent:
            self._produce_slowly(release)
        pending = self._pending
        in_queue = self._producer.flush(self._flush_timeout)
        # Copied and emptied in place: every release produced refers to this one list.
        failures = self._failures[:]
        self._failures.clear()
        outcomes: Outcomes[T] = [
            (release, str(err))
            for release, err in failures
            if pending.pop(id(release), None) is not None
        ]
        if in_queue == 0:  # every record produced so far was delivered or reported failed
            outcomes.extend((release, None) for release in pending.values())
            pending.clear()
        return outcomes

    def _produce_slowly(self, release: Release[T]) -> None:
        """librdkafka's queue is full: serve delivery reports to make room, then produce."""
        self._pending[id(release)] = release
        release.failures = self._failures
        routed, emission = release.routed, release.routed.emission
        key: bytes | None
        if emission is None:
            to, value, key = self._topic, routed.value, routed.ready_key
            headers: Any = [*routed.headers, *release_stamp(release)]
        else:
            to, value, key = emission.topic, emission.value, emission.key
            headers = emission.headers
        while True:
            try:
                self._producer.produce(to, value, key, headers=headers, on_delivery=release)
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                release(exc.args[0], None)
                return
