"""The release publisher's bookkeeping: with failure-only delivery reports, a release counts as
delivered once a flush empties the producer's queue without a failure reported for it; a flush
that times out leaves the round pending until a later flush drains it. (The producer here is an
in-memory stand-in for librdkafka's queue; the real one is exercised in the dispatcher's
integration and end-to-end tests.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from duetime_dispatcher.holding import Release
from duetime_dispatcher.publisher import ReadyPublisher
from tests.unit.test_dispatcher_holding import T0, run_due, src


class QueueProducer:
    """librdkafka's queue with ``delivery.report.only.error``: callbacks for failures only."""

    def __init__(self) -> None:
        self.queue: list[tuple[bytes | None, Callable[[Any, Any], None]]] = []
        self.fail: set[bytes] = set()  # keys the broker refuses
        self.stalled = False  # the broker does not answer: flush times out

    def produce(self, topic: str, value: bytes, key: bytes | None, **kwargs: Any) -> None:
        self.queue.append((key, kwargs["on_delivery"]))

    def flush(self, timeout: float) -> int:
        if self.stalled:
            return len(self.queue)
        for key, report in self.queue:
            if key in self.fail:
                report("MSG_TIMED_OUT", None)
        self.queue.clear()
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def _releases(n: int) -> list[Release[str]]:
    return [Release(run_due(T0, i), src(i), T0, None, (run_due(T0, i).run_id, 1)) for i in range(n)]  # type: ignore[arg-type]


def _publish(publisher: ReadyPublisher[str], releases: list[Release[str]]) -> dict[int, str | None]:
    outcomes = asyncio.run(publisher.publish(releases))
    return {release.routed.run_id.int - 1: reason for release, reason in outcomes}


def test_every_release_of_a_drained_flush_is_delivered_but_the_refused_one() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 1.0)  # type: ignore[arg-type]
    releases = _releases(5)
    producer.fail.add(releases[3].routed.ready_key)
    assert _publish(publisher, releases) == {0: None, 1: None, 2: None, 3: "MSG_TIMED_OUT", 4: None}


def test_a_flush_that_times_out_leaves_the_round_pending_until_the_queue_drains() -> None:
    producer = QueueProducer()
    publisher: ReadyPublisher[str] = ReadyPublisher(producer, "runs.ready", 1.0)  # type: ignore[arg-type]
    producer.stalled = True
    first = _releases(3)
    assert _publish(publisher, first) == {}  # nothing known yet: nothing acked, nothing failed
    producer.stalled = False
    producer.fail.add(first[1].routed.ready_key)
    # The next round (here: nothing new) drains the queue and answers for the earlier round.
    assert _publish(publisher, []) == {0: None, 1: "MSG_TIMED_OUT", 2: None}
    assert _publish(publisher, []) == {}
