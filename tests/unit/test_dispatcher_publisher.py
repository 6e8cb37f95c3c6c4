"""The release publisher's bookkeeping: every record has its delivery report, and a settle
returns each release's own outcome as reported; a settle whose polls time out leaves the
unanswered releases to a later settle, and rounds sent while a settle waits are answered by the
next one. (The producer here is an in-memory stand-in for librdkafka's queue; the real one is
exercised in the dispatcher's integration and end-to-end tests.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from duetime_dispatcher.holding import Release
from duetime_dispatcher.publisher import ReadyPublisher
from tests.unit.test_dispatcher_holding import T0, run_due, src


class QueueProducer:
    """librdkafka's queue: a delivery report per record, served by flush and poll."""

    def __init__(self, room: int = 1_000_000) -> None:
        self.queue: list[tuple[bytes | None, Callable[[Any, Any], None]]] = []
        self.fail: set[bytes] = set()  # keys the broker refuses
        self.refuse: set[bytes] = set()  # keys the client itself refuses (too large)
        self.stalled = False  # the broker does not answer: flush times out
        self.slow: set[bytes] = set()  # keys whose answer has not come yet
        self.on_flush: Callable[[], None] | None = None  # runs once, at the next poll
        self.room = room  # records the queue takes before BufferError
        self.produced: list[bytes | None] = []

    def produce(self, topic: str, value: bytes, key: bytes | None, **kwargs: Any) -> None:
        if key in self.refuse:
            raise KafkaException("MSG_SIZE_TOO_LARGE")
        if len(self.queue) >= self.room:
            raise BufferError("Local: Queue full")
        self.queue.append((key, kwargs["on_delivery"]))
        self.produced.append(key)

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return len(self.queue)

    def poll(self, timeout: float) -> int:
        if self.on_flush is not None:
            hook, self.on_flush = self.on_flush, None
            hook()
        if self.stalled:
            return 0
        waiting = [(key, report) for key, report in self.queue if key in self.slow]
        for key, report in self.queue:
            if key not in self.slow:
                report("MSG_TIMED_OUT" if key in self.fail else None, None)
        served = len(self.queue) - len(waiting)
        self.queue[:] = waiting
        return served


def _releases(n: int) -> list[Release[str]]:
    return [Release(run_due(T0, i), src(i), T0, None, (run_due(T0, i).run_id, 1)) for i in range(n)]  # type: ignore[arg-type]


def _publish(publisher: ReadyPublisher[str], releases: list[Release[str]]) -> dict[int, str | None]:
    outcomes = asyncio.run(publisher.settle(publisher.send(releases)))
    return {release.routed.run_id.int - 1: reason for release, reason in outcomes}


def test_every_release_of_a_drained_flush_is_delivered_but_the_refused_one() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 1.0)  # type: ignore[arg-type]
    releases = _releases(5)
    producer.fail.add(releases[3].routed.ready_key)
    assert _publish(publisher, releases) == {0: None, 1: None, 2: None, 3: "MSG_TIMED_OUT", 4: None}


def test_a_settle_that_times_out_leaves_the_round_pending_until_the_broker_answers() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 0.05)  # type: ignore[arg-type]
    producer.stalled = True
    first = _releases(3)
    assert _publish(publisher, first) == {}  # nothing known yet: nothing acked, nothing failed
    producer.stalled = False
    producer.fail.add(first[1].routed.ready_key)
    # The next round (here: nothing new) drains the queue and answers for the earlier round.
    assert _publish(publisher, []) == {0: None, 1: "MSG_TIMED_OUT", 2: None}
    assert _publish(publisher, []) == {}


def test_send_produces_at_once_and_leaves_what_the_full_queue_refused_to_settle() -> None:
    producer = QueueProducer(room=2)
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 1.0)  # type: ignore[arg-type]
    releases = _releases(5)
    unsent = publisher.send(releases)
    # Produced on the caller's thread until the queue was full; the rest waits for room.
    assert producer.produced == [r.routed.ready_key for r in releases[:2]]
    assert unsent == releases[2:]
    producer.fail.add(releases[4].routed.ready_key)
    outcomes = asyncio.run(publisher.settle(unsent))
    assert producer.produced == [r.routed.ready_key for r in releases]
    assert {r.routed.run_id.int - 1: reason for r, reason in outcomes} == {
        0: None,
        1: None,
        2: None,
        3: None,
        4: "MSG_TIMED_OUT",
    }


def test_a_record_the_client_refuses_fails_alone() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 1.0)  # type: ignore[arg-type]
    releases = _releases(3)
    producer.refuse.add(releases[1].routed.ready_key)
    assert publisher.send(releases) == []
    outcomes = dict(
        (r.routed.run_id.int - 1, reason) for r, reason in asyncio.run(publisher.settle())
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert outcomes[1] is not None and "MSG_SIZE_TOO_LARGE" in outcomes[1]


def test_a_release_counts_as_delivered_on_its_own_answer_not_the_round_s() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 0.05)  # type: ignore[arg-type]
    releases = _releases(4)
    producer.slow.add(releases[2].routed.ready_key)  # its partition's leader is slow to answer
    # The others are known at once; the slow one is neither delivered nor failed yet.
    assert _publish(publisher, releases) == {0: None, 1: None, 3: None}
    assert publisher.outstanding == 1
    producer.slow.clear()
    assert _publish(publisher, []) == {2: None}
    assert publisher.outstanding == 0


def test_a_round_sent_while_a_settle_waits_is_answered_once_and_never_lost() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 0.05)  # type: ignore[arg-type]
    releases = _releases(6)
    first, second = releases[:3], releases[3:]
    producer.fail.add(second[0].routed.ready_key)
    producer.slow.add(second[1].routed.ready_key)
    # The loop releases the next round while the settling thread waits for the first's answers.
    producer.on_flush = lambda: publisher.send(second)
    answered = _publish(publisher, first)
    assert {0, 1, 2} <= answered.keys()
    assert publisher.outstanding == 6 - len(answered)
    producer.slow.clear()
    later = _publish(publisher, [])
    assert answered.keys().isdisjoint(later.keys())
    assert answered | later == {0: None, 1: None, 2: None, 3: "MSG_TIMED_OUT", 4: None, 5: None}
    assert publisher.outstanding == 0
