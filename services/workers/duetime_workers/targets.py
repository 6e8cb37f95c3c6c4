"""Route a run to the executor for its kind of target (HTTP or Kafka)."""

from __future__ import annotations

from duetime.model import HttpTarget, RunEvent
from duetime.store import Claim

from .http_target import HttpExecutor
from .kafka_target import KafkaExecutor
from .outcome import AttemptOutcome

__all__ = ["Targets"]


class Targets:
    """A ``TargetExecutor`` over the HTTP and Kafka executors."""

    def __init__(self, http: HttpExecutor, kafka: KafkaExecutor) -> None:
        self._http = http
        self._kafka = kafka

    async def prewarm(self, run: RunEvent, count: int) -> int:
        """Connections opened ahead of ``count`` calls like ``run``'s (HTTP targets only)."""
        if isinstance(run.target, HttpTarget):
            return await self._http.prewarm(run.target, count)
        return 0

    async def execute(self, run: RunEvent, claim: Claim) -> AttemptOutcome:
        target = run.target
        if isinstance(target, HttpTarget):
            return await self._http.execute(
                target,
                run_id=run.run_id,
                attempt=claim.attempt,
                fencing_token=claim.fencing_token,
                scheduled_for=run.scheduled_for,
                callback_token=claim.lease_token,
                resume=claim.resume,
            )
        return await self._kafka.execute(
            target,
            run_id=run.run_id,
            attempt=claim.attempt,
            fencing_token=claim.fencing_token,
            scheduled_for=run.scheduled_for,
        )
