"""The runs.ready consume loop against an in-memory consumer: backpressure, commits, poison."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from fastavro import schemaless_writer

from duetime.bus.records import RUN_EVENTS
from duetime.errors import CodecError
from duetime.model import HttpTarget, RunEvent
from duetime_workers.consumer import Fetched, ReadyConsumer, Slots
from duetime_workers.decoding import decode_run
from duetime_workers.offsets import OffsetTracker

TOPIC = "t.runs.ready"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _event(attempt: int = 1, max_attempts: int = 3) -> RunEvent:
    return RunEvent(
        run_id=uuid.uuid4(),
        job_id="j",
        tenant="acme",
        scheduled_for=NOW,
        due_at=NOW,
        attempt=attempt,
        max_attempts=max_attempts,
        target_service="svc",
        target=HttpTarget(url="https://example.com"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
    )


class FakeMessage:
    def __init__(
        self,
        partition: int,
        offset: int,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        self._partition, self._offset, self._value, self._headers = (
            partition,
            offset,
            value,
            headers,
        )

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, str | bytes | None]] | None:
        return self._headers


class FakeConsumer:
    """Serves queued messages from non-paused partitions; records commits and pauses."""

    def __init__(self, messages: list[FakeMessage]) -> None:
        self.queue = list(messages)
        self.partitions = sorted({m.partition() for m in messages}) or [0]
        self.paused: set[int] = set()
        self.commits: list[tuple[int, int]] = []
        self.max_batch = 0
        self.closed = False
        self._on_assign: Callable[..., None] | None = None
        self.lock = threading.Lock()

    def subscribe(self, topics: list[str], on_assign: Callable[..., None], **_: Any) -> None:
        self._on_assign = on_assign

    def _assign_once(self) -> None:
        if self._on_assign is not None:
            callback, self._on_assign = self._on_assign, None
            callback(self, [TopicPartition(TOPIC, p) for p in self.partitions])

    def _take(self, count: int) -> list[FakeMessage]:
        with self.lock:
            out: list[FakeMessage] = []
            for m in list(self.queue):
                if len(out) == count:
                    break
                if m.partition() not in self.paused:
                    out.append(m)
                    self.queue.remove(m)
            return out

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self._assign_once()
        self.max_batch = max(self.max_batch, num_messages)
        out = self._take(num_messages)
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def poll(self, timeout: float) -> FakeMessage | None:
        self._assign_once()
        out = self._take(1)
        if not out:
            time.sleep(min(timeout, 0.01))
        return out[0] if out else None

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in self.partitions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.extend((tp.partition, tp.offset) for tp in offsets)

    def close(self) -> None:
        self.closed = True


def _record(partition: int, offset: int, run: RunEvent | None = None) -> FakeMessage:
    run = run or _event()
    return FakeMessage(partition, offset, RUN_EVENTS.encode(run), RUN_EVENTS.headers())


class Harness:
    def __init__(
        self, messages: list[FakeMessage], capacity: int, pause_after: float = 10.0
    ) -> None:
        self.fake = FakeConsumer(messages)
        self.slots = Slots(capacity)
        self.tracker = OffsetTracker()
        self.submitted: list[Fetched] = []
        self.batches: list[int] = []  # sizes of the hand-overs to the event loop
        self.max_in_use = 0
        self.loop = ReadyConsumer(
            self.fake,  # type: ignore[arg-type]
            TOPIC,
            slots=self.slots,
            tracker=self.tracker,
            submit=self._submit,
            poll_timeout=0.01,
            pause_after=pause_after,
        )
        self.thread = threading.Thread(target=self.loop.run, daemon=True)

    def _submit(self, batch: list[Fetched]) -> None:
        self.batches.append(len(batch))
        self.submitted.extend(batch)
        self.max_in_use = max(self.max_in_use, self.slots.in_use())

    def finish(self, fetched: Fetched) -> None:
        self.tracker.handled(fetched.partition, fetched.offset)
        self.slots.release()

    def stop(self) -> None:
        self.loop.stop_fetching.set()
        self.loop.drained.set()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(messages: list[FakeMessage], capacity: int, pause_after: float = 10.0) -> Harness:
        h = Harness(messages, capacity, pause_after)
        made.append(h)
        h.thread.start()
        return h

    yield make
    for h in made:
        if h.thread.is_alive():
            h.stop()


def _more_than(items: list[Fetched], count: int) -> bool:
    return len(items) > count


def _until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_takes_no_more_than_the_free_slots(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory([_record(0, i) for i in range(10)], 3, pause_after=0.2)
    _until(lambda: len(h.submitted) == 3)
    # Saturated: nothing more is taken; the partition is paused once that lasts pause_after.
    _until(lambda: h.fake.paused == {0})
    assert len(h.submitted) == 3
    assert h.batches[0] == 3  # one fetch, one hand-over: the loop claims them in one statement
    finished = 0
    while finished < 10:
        _until(partial(_more_than, h.submitted, finished))
        batch = h.submitted[finished:]
        for fetched in batch:
            h.finish(fetched)
        finished += len(batch)
    assert h.max_in_use <= 3 and h.fake.max_batch <= 3
    assert [f.offset for f in h.submitted] == list(range(10))
    _until(lambda: (0, 10) in h.fake.commits)


def test_commits_only_up_to_the_first_unfinished_offset(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory([_record(0, i) for i in range(3)], 3)
    _until(lambda: len(h.submitted) == 3)
    first, second, third = h.submitted
    h.finish(third)
    h.finish(second)
    time.sleep(0.05)  # give the loop a few iterations to (wrongly) commit
    assert all(offset == 0 for _, offset in h.fake.commits)
    h.finish(first)
    _until(lambda: (0, 3) in h.fake.commits)


def test_undecodable_records_are_committed_past(harness_factory: Callable[..., Harness]) -> None:
    bad = [
        FakeMessage(0, 0, b"\xff\x00garbage", RUN_EVENTS.headers()),
        FakeMessage(0, 1, None),
        FakeMessage(0, 2, RUN_EVENTS.encode(_event()), [("duetime-schema", b"0000")]),
        _record(0, 3, _event(attempt=4, max_attempts=3)),  # decodes, but impossible
        _record(0, 4),
    ]
    h = harness_factory(bad, 4)
    _until(lambda: len(h.submitted) == 1)
    assert h.submitted[0].offset == 4
    h.finish(h.submitted[0])
    _until(lambda: (0, 5) in h.fake.commits)


def test_shutdown_commits_handled_work_and_closes(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory([_record(0, 0), _record(0, 1)], 1)
    _until(lambda: len(h.submitted) == 1)
    h.loop.stop_fetching.set()
    h.finish(h.submitted[0])
    h.loop.drained.set()
    h.thread.join(5)
    assert h.fake.closed
    assert h.fake.commits[-1] == (0, 1)  # offset 1 was never started: not committed past
    assert len(h.submitted) == 1


def test_revoked_partitions_are_committed_and_forgotten(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory([_record(0, 0), _record(1, 0)], 2)
    _until(lambda: len(h.submitted) == 2)
    p0 = next(f for f in h.submitted if f.partition[1] == 0)
    h.finish(p0)
    h.loop._on_revoke(h.fake, [TopicPartition(TOPIC, 0)])
    assert (0, 1) in h.fake.commits
    p1 = next(f for f in h.submitted if f.partition[1] == 1)
    h.finish(p1)
    _until(lambda: (1, 1) in h.fake.commits)


def test_absurd_durations_are_poison_not_a_crash() -> None:
    record = RUN_EVENTS._to_record(_event())  # the codec's own mapping, then break one field
    record["lease_ms"] = 2**62
    buffer = io.BytesIO()
    schemaless_writer(buffer, RUN_EVENTS.schema, record)
    with pytest.raises(CodecError):
        decode_run(buffer.getvalue(), RUN_EVENTS.headers())
