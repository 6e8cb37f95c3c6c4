"""Ingest of the jobs topic: decode, validate, upsert by version; bad records to jobs.rejected.

A poison record never stops the consumer (invariant I12): whatever fails to decode or validate is
copied byte for byte to ``<prefix>jobs.rejected`` with the field and the reason, and the offset
moves on. Offsets are committed only after the batch is stored and the rejections acknowledged,
so a crash replays the batch; upsert-by-version makes the replay harmless.

A consumed batch is written through the same bulk path as ``duetime jobs apply``
(``store.jobs.jobs_apply``: a few statements per batch, the same job twice in a batch resolved in
topic order) and logged once per batch; each job's outcome is logged at DEBUG only.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.errors import BusError, CodecError, InvalidInput
from duetime.events import JobRejected, JobTombstone
from duetime.logs import event
from duetime.model import JobDefinition
from duetime.schedule import ScheduleCache
from duetime.store import Store
from duetime.store.jobs import jobs_apply

__all__ = ["IngestStats", "JobIngest"]

log = logging.getLogger("duetime.planner.ingest")
MAX_RECORD_BYTES = 1_000_000


@dataclass(frozen=True)
class IngestStats:
    accepted: int = 0
    rejected: int = 0


class JobIngest:
    def __init__(
        self,
        store: Store,
        consumer: Consumer,
        producer: Producer,
        catalog: TopicCatalog,
        batch_size: int = 5000,
    ) -> None:
        self.store = store
        self.consumer = consumer
        self.producer = producer
        self.catalog = catalog
        self.batch_size = batch_size
        self.cache = ScheduleCache()
        consumer.subscribe([catalog.jobs])

    def run_once(self, timeout: float = 0.0) -> IngestStats:
        messages = self.consumer.consume(self.batch_size, timeout)
        if not messages:
            return IngestStats()
        accepted: list[JobDefinition | JobTombstone] = []
        rejected: list[JobRejected] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    event(log, "jobs.consume_error", logging.WARNING, error=err)
                continue
            try:
                accepted.append(self._decode(msg))
            except (CodecError, InvalidInput) as exc:
                field = exc.field if isinstance(exc, InvalidInput) else ""
                reason = exc.reason if isinstance(exc, InvalidInput) else str(exc)
                rejected.append(_rejection(msg, field, reason))
        if rejected:
            self._publish_rejections(rejected)
        if accepted:
            with self.store.tx() as tx:
                writes = jobs_apply(tx, accepted, self.cache)
            actions = Counter(write.action for write in writes)
            event(log, "jobs.ingested", records=len(accepted), **actions)
            if log.isEnabledFor(logging.DEBUG):
                for write in writes:
                    event(
                        log,
                        f"job.{write.action}",
                        logging.DEBUG,
                        job_id=write.job_id,
                        version=write.version,
                    )
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # Only error events (e.g. partition EOF) in this batch: there is nothing to commit.
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise BusError(f"cannot commit jobs-topic offsets: {exc}") from exc
        return IngestStats(accepted=len(accepted), rejected=len(rejected))

    def _decode(self, msg: Any) -> JobDefinition | JobTombstone:
        value = msg.value()
        if value is not None and len(value) > MAX_RECORD_BYTES:
            raise InvalidInput("", f"record of {len(value)} bytes exceeds {MAX_RECORD_BYTES}")
        item = JOB_DEFINITIONS.decode(value, msg.headers())
        key = msg.key()
        if key is not None and key.decode("utf-8", "replace") != item.job_id:
            raise InvalidInput("job_id", "does not match the record key")
        return item

    def _publish_rejections(self, rejected: list[JobRejected]) -> None:
        tracker = DeliveryTracker(self.producer)
        for item in rejected:
            event(
                log,
                "job.rejected",
                logging.WARNING,
                partition=item.source_partition,
                offset=item.source_offset,
                field=item.field,
                reason=item.reason,
            )
            tracker.produce(
                item,
                self.catalog.jobs_rejected,
                item.key,
                JOB_REJECTIONS.encode(item),
                JOB_REJECTIONS.headers(),
            )
        _acked, failed = tracker.wait(10.0)
        if failed:
            # Without the rejection safely stored we must not move past the record.
            raise BusError(f"could not publish {len(failed)} rejections: {failed[0][1]}")


def _rejection(msg: Any, field: str, reason: str) -> JobRejected:
    return JobRejected(
        source_topic=msg.topic(),
        source_partition=msg.partition(),
        source_offset=msg.offset(),
        key=msg.key(),
        value=msg.value(),
        field=field,
        reason=reason,
        rejected_at=datetime.now(UTC),
    )
