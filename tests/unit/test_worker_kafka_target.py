"""The worker's Kafka executor refuses duetime's own topics before it produces: defence in depth
behind job validation, for a definition stored before validation refused the name, or written to
the database by other means."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import cast

import pytest

from duetime.model import KafkaTarget
from duetime_workers.kafka_target import KafkaExecutor
from duetime_workers.outcome import OutcomeKind
from duetime_workers.producer import AsyncProducer, Headers


class _RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Headers) -> None:
        self.sent.append(topic)


async def _execute(topic: str, reserved_prefix: str) -> tuple[OutcomeKind, str | None, list[str]]:
    producer = _RecordingProducer()
    executor = KafkaExecutor(cast(AsyncProducer, producer), reserved_prefix)
    outcome = await executor.execute(
        KafkaTarget(topic=topic, key=None, value="{}"),
        run_id=uuid.UUID(int=1),
        attempt=1,
        fencing_token=2,
        scheduled_for=datetime(2026, 12, 3, tzinfo=UTC),
    )
    return outcome.kind, outcome.error, producer.sent


@pytest.mark.parametrize("topic", ["jobs", "jobs.rejected", "runs.ready", "runs.due.0s"])
async def test_without_a_topic_prefix_duetimes_own_topics_are_refused(topic: str) -> None:
    kind, error, sent = await _execute(topic, "")
    assert kind == OutcomeKind.FINAL and sent == []
    assert error is not None and "duetime's own topics" in error


async def test_with_a_prefix_the_topics_under_it_are_refused_and_others_produced() -> None:
    kind, error, sent = await _execute("duetime.runs.ready", "duetime.")
    assert (kind, sent) == (OutcomeKind.FINAL, []) and "internal to duetime" in (error or "")
    assert await _execute("billing.tick", "duetime.") == (
        OutcomeKind.SUCCEEDED,
        None,
        ["billing.tick"],
    )
