"""A confluent-kafka producer the event loop can await, plus fire-and-forget publishing.

librdkafka reports deliveries through callbacks served by ``poll()``. A small thread polls all the
time; the callbacks of one ``poll()`` are collected and settle their asyncio futures on the loop
in one ``call_soon_threadsafe`` (one wake-up of the loop per poll, not one per record), so a
Kafka target's attempt can wait for the broker's acknowledgement without blocking other attempts.
Heartbeats and results are published without waiting: the database is the source of truth for
both, and a lost one is only a late signal for the reaper and dispatcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Producer

from .logs import event

__all__ = ["AsyncProducer", "DeliveryFailed"]

Headers = Sequence[tuple[str, str | bytes | None]]
_RecordHeaders = list[tuple[str, str | bytes | None]]
_Settlement = tuple["asyncio.Future[None]", KafkaError | None]

# Errors that will not go away by sending the same record again.
_FATAL_CODES = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError._INVALID_ARG,
    }
)


class DeliveryFailed(Exception):
    """The broker did not acknowledge a record. ``fatal`` = retrying the same record is futile."""

    def __init__(self, message: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


class AsyncProducer:
    """Wraps one ``Producer``; ``start()`` before use, ``close()`` at shutdown."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="duetime-producer", daemon=True)
        self._settle_lock = threading.Lock()
        self._settlements: dict[asyncio.AbstractEventLoop, list[_Settlement]] = {}

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)
            self._hand_over()

    def _hand_over(self) -> None:
        """Settle the futures whose reports the last poll served, in one loop wake-up each."""
        with self._settle_lock:
            pending, self._settlements = self._settlements, {}
        for loop, items in pending.items():
            # RuntimeError: the loop is closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_all, items)

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Headers) -> None:
        """Produce one record and wait for the broker's acknowledgement.

        Raises:
            DeliveryFailed: The broker refused the record or it timed out
                (``message.timeout.ms``).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def report(err: KafkaError | None, _msg: Any) -> None:
            with self._settle_lock:
                self._settlements.setdefault(loop, []).append((future, err))

        while True:
            try:
                self._producer.produce(
                    topic, value, key, headers=_record_headers(headers), on_delivery=report
                )
                break
            except BufferError:  # the local queue is full: let the poll thread drain it
                await asyncio.sleep(0.05)
            except Exception as exc:  # KafkaException/TypeError for a record it cannot take
                raise DeliveryFailed(f"cannot produce to {topic}: {exc}", fatal=True) from exc
        await future

    def publish(self, topic: str, key: bytes | None, value: bytes, headers: Headers) -> None:
        """Produce without waiting; a failure is logged (``bus.publish_failed``), never raised."""

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                event("bus.publish_failed", logging.WARNING, topic=topic, error=str(err))

        try:
            self._producer.produce(
                topic, value, key, headers=_record_headers(headers), on_delivery=report
            )
        except Exception as exc:  # BufferError when the local queue is full
            event("bus.publish_failed", logging.WARNING, topic=topic, error=repr(exc))

    def close(self, timeout: float) -> int:
        """Deliver what is queued (up to ``timeout`` s), stop polling; returns records left."""
        remaining: int = self._producer.flush(timeout)
        self._hand_over()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        return remaining


def _settle_all(items: list[_Settlement]) -> None:
    for future, err in items:
        _settle(future, err)


def _settle(future: asyncio.Future[None], err: KafkaError | None) -> None:
    if future.done():  # the waiting attempt was cancelled (lease lost, shutdown)
        return
    if err is None:
        future.set_result(None)
    else:
        fatal = err.code() in _FATAL_CODES or err.fatal()
        future.set_exception(DeliveryFailed(f"delivery failed: {err.str()}", fatal=fatal))


def _record_headers(headers: Headers) -> _RecordHeaders:
    return list(headers)
