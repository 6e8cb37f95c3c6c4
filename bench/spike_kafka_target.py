"""The spike benchmark's Kafka target: a consumer of the jobs' topic recording every record.

Run as its own process::

    python -m bench.spike_kafka_target BOOTSTRAP TOPIC FETCH_WAIT_MS OUT

"Handler start" for a Kafka-target job is the moment a consumer of the job's topic receives the
record. The consumer reads every partition from the beginning (assigned, so there is no group join
to wait for; it still has its own group id) with the project's local client profile, except
``fetch.wait.max.ms``: the embedded broker answers a waiting fetch by polling (it sleeps half the
remaining wait, again and again), not when data lands, so a long wait would measure the consumer
rather than the scheduler.

Per record it writes the receive time (``time.time()`` once the client handed it over), the
record's CreateTime and the idempotency headers to OUT, from a writer thread. Same stdout
protocol as :mod:`bench.spike_http_target`: ``ready``, ``count N``, ``done N``.

Like the HTTP target, which parses headers after the run, the consumer keeps its own work off the
measured path: the writer handles a batch ``_DEFER`` seconds after it was received, so a spike's
records (received within about a second) are read and formatted once the spike is over, instead of
competing for the same two cores with the services that deliver them. A steady load is written
with the same delay, so what is held stays bounded (``_DEFER`` seconds of records).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.spike_recorder import print_line
from duetime.bus.kafka import consumer_config
from duetime.config import Settings

__all__ = ["main"]

_RUN_ID = "X-Duetime-Run-Id"
_ATTEMPT = "X-Duetime-Attempt"
_SCHEDULED_FOR = "X-Duetime-Scheduled-For"


def _line(received_at: float, message: Any) -> str | None:
    """One line of :func:`bench.spike_recorder.read_arrivals`, or None for a foreign record."""
    run_id = attempt = scheduled = None
    for key, value in message.headers() or ():
        if key == _RUN_ID:
            run_id = value
        elif key == _ATTEMPT:
            attempt = value
        elif key == _SCHEDULED_FOR:
            scheduled = value
    if run_id is None or scheduled is None:
        return None
    created_ms = message.timestamp()[1]
    created = f"{created_ms / 1000:.3f}" if created_ms > 0 else ""
    return (
        f"{run_id.decode()}\t{(attempt or b'0').decode()}\t{scheduled.decode()}"
        f"\t{received_at:.6f}\t{created}\n"
    )


#: How long after its receipt a batch is read and written (see the module's docstring).
_DEFER = 2.0


def _write(
    out: Path, batches: queue.SimpleQueue[tuple[float, list[Any]] | None], stop: threading.Event
) -> None:
    with out.open("w", encoding="ascii") as sink:
        while (item := batches.get()) is not None:
            now, batch = item
            wait = now + _DEFER - time.time()
            if wait > 0:
                stop.wait(wait)  # the end of the run writes the rest at once
            lines = [
                line for m in batch if m.error() is None and (line := _line(now, m)) is not None
            ]
            sink.write("".join(lines))


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
    count = 0
    # A writer thread formats and writes the records, so that work never holds up the next
    # poll for long (the interpreter switches threads every few ms); a steady scenario brings
    # millions of records, too many to keep in memory.
    batches: queue.SimpleQueue[tuple[float, list[Any]] | None] = queue.SimpleQueue()
    writer = threading.Thread(target=_write, args=(Path(out), batches, stop), daemon=True)
    writer.start()
    batch = consumer.consume(1, 0.5)  # connect and fetch once before saying ready
    print_line("ready")
    next_report = 0.0
    while True:
        now = time.time()
        if batch:
            batches.put((now, batch))
            count += len(batch)
        if now >= next_report:
            print_line(f"count {count}")
            next_report = now + 0.25
        if stop.is_set():
            break
        # poll() returns as soon as one record is there; consume(n, 0) then takes what is
        # already queued. (consume(n, timeout) alone would wait out the timeout whenever
        # fewer than n records came, and that wait would count as lateness.)
        first = consumer.poll(0.05)
        batch = [] if first is None else [first, *consumer.consume(10_000, 0)]
    batches.put(None)
    writer.join()
    consumer.close()
    print_line(f"done {count}")


if __name__ == "__main__":
    main()
