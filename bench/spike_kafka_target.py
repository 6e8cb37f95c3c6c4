"""The spike benchmark's Kafka target: a consumer of the jobs' topic recording every record.

Run as its own process::

    python -m bench.spike_kafka_target BOOTSTRAP TOPIC FETCH_WAIT_MS OUT

"Handler start" for a Kafka-target job is the moment a consumer of the job's topic receives the
record. The consumer reads every partition from the beginning (assigned, so there is no group join
to wait for; it still has its own group id) with the project's local client profile, except
``fetch.wait.max.ms``: the embedded broker answers a waiting fetch by polling, not when data lands
(shared/KAFKA.md §2.1), so a long wait would measure the consumer rather than the scheduler.

It keeps the receive time (``time.time()`` when ``consume`` returned the batch), the record's
CreateTime and its headers; the headers are parsed after the run. Same stdout protocol as
:mod:`bench.spike_http_target`: ``ready``, ``count N``, ``done N``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.spike_recorder import Arrival, parse_instant, print_line, write_arrivals
from duetime.bus.kafka import consumer_config
from duetime.config import Settings

__all__ = ["main"]


def _arrival(received_at: float, created_ms: int, headers: Any) -> Arrival | None:
    fields = {k.lower(): v for k, v in headers or () if v is not None}
    run_id = fields.get("x-duetime-run-id")
    scheduled = fields.get("x-duetime-scheduled-for")
    if run_id is None or scheduled is None:
        return None
    attempt = int(fields.get("x-duetime-attempt", b"0"))
    return Arrival(
        run_id.decode("ascii"),
        attempt,
        parse_instant(scheduled.decode("ascii")),
        received_at,
        created_ms / 1000 if created_ms > 0 else None,
    )


def main() -> None:
    bootstrap, topic, fetch_wait_ms, out = sys.argv[1:5]
    settings = Settings(database_url="", kafka_bootstrap=bootstrap)
    consumer = Consumer(
        consumer_config(
            settings,
            f"bench-target-{time.time_ns()}",
            **{"fetch.wait.max.ms": int(fetch_wait_ms), "enable.partition.eof": False},
        )
    )
    metadata = consumer.list_topics(timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()  # a line, or EOF when the parent goes away
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    received: list[tuple[float, int, Any]] = []
    batch = consumer.consume(1, 0.5)  # connect and fetch once before saying ready
    print_line("ready")
    next_report = 0.0
    while True:
        now = time.time()
        for message in batch:
            if message.error() is None:
                received.append((now, message.timestamp()[1], message.headers()))
        if now >= next_report:
            print_line(f"count {len(received)}")
            next_report = now + 0.25
        if stop.is_set():
            break
        batch = consumer.consume(10_000, 0.05)
    consumer.close()
    arrivals = [a for a in (_arrival(*r) for r in received) if a is not None]
    write_arrivals(Path(out), arrivals)
    print_line(f"done {len(arrivals)}")


if __name__ == "__main__":
    main()
