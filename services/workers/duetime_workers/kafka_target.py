"""Execute a Kafka target once: produce the job's record and wait for the broker's ack.

Success means the broker acknowledged the record (``acks=all``; idempotent producer in the
``prod`` profile, docs/decisions.md 15). The same idempotency and fencing headers as HTTP targets
travel as record headers, because a redelivered attempt produces the record again and consumers
must be able to drop the duplicate.

Topics under duetime's own prefix, and Kafka's internal ``__`` topics, are refused: a job that
could write onto ``duetime.runs.ready`` could forge run events for other tenants.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from duetime.bus.target_records import kafka_headers, topic_refusal
from duetime.model import KafkaTarget

from .outcome import AttemptOutcome, OutcomeKind, final, retryable
from .producer import AsyncProducer, DeliveryFailed

__all__ = ["KafkaExecutor", "topic_refusal"]


class KafkaExecutor:
    """Produces job records through the worker's shared producer."""

    def __init__(self, producer: AsyncProducer, reserved_prefix: str) -> None:
        self._producer = producer
        self._reserved_prefix = reserved_prefix

    async def execute(
        self,
        target: KafkaTarget,
        *,
        run_id: uuid.UUID,
        attempt: int,
        fencing_token: int,
        scheduled_for: datetime,
    ) -> AttemptOutcome:
        why = topic_refusal(target.topic, self._reserved_prefix)
        if why is not None:
            return final(f"target refused: {why}")
        key = target.key.encode("utf-8") if target.key is not None else None
        try:
            await self._producer.send(
                target.topic,
                key,
                target.value.encode("utf-8"),
                kafka_headers(run_id, attempt, fencing_token, scheduled_for),
            )
        except DeliveryFailed as exc:
            return final(str(exc)) if exc.fatal else retryable(str(exc))
        return AttemptOutcome(OutcomeKind.SUCCEEDED)
