"""Read back when the dispatcher released each run: the ``runs.ready`` records' CreateTime.

Read after the scenario, not during it, so this consumer adds no fetch load on the broker while
the scheduler is measured (the record timestamps are the dispatcher's produce times whenever
they are read). It assigns every partition from the beginning under its own group id and stops
at the end of every partition (the high watermark carried by fetch responses, which is right on
the embedded broker, unlike ListOffsets).
"""

from __future__ import annotations

import time
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from bench.spike_measure import Release
from duetime.bus.kafka import consumer_config
from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_headers import read_routing
from duetime.config import Settings

__all__ = ["read_releases"]


def read_releases(
    settings: Settings, topic: str, due_from: float, due_to: float, timeout: float = 300.0
) -> tuple[dict[str, Release], int]:
    """The earliest release of each run due in [due_from, due_to) (epoch s) on ``topic``, and
    the number of records read (all of them)."""
    consumer = Consumer(
        consumer_config(settings, f"bench-ready-{time.time_ns()}", **{"enable.partition.eof": True})
    )
    releases: dict[str, Release] = {}
    records = 0
    try:
        partitions = sorted(consumer.list_topics(timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.5)
            if not batch and time.monotonic() - idle_since > 10:
                break  # no EOF events and nothing new: take what we have
            for message in batch:
                idle_since = time.monotonic()
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition() or 0)
                    continue
                at_end.discard(message.partition())
                records += 1
                created = message.timestamp()[1] / 1000
                headers = cast(list[tuple[str, bytes | None]] | None, message.headers())
                routing = read_routing(headers)
                if routing is not None:
                    run_id, due_at = str(routing.run_id), routing.due_at_ms / 1000
                else:
                    run = RUN_EVENTS.decode(message.value(), headers)
                    run_id, due_at = str(run.run_id), run.due_at.timestamp()
                if not due_from <= due_at < due_to:
                    continue
                seen = releases.get(run_id)
                if seen is None or created < seen.created_at:
                    releases[run_id] = Release(created, due_at)
    finally:
        consumer.close()
    return releases, records
