"""Ingest of the jobs topic: decode, validate, upsert by version; bad records to jobs.rejected.

A poison record never stops the consumer (invariant I12): whatever fails to decode or validate is
copied byte for byte to ``<prefix>jobs.rejected`` with the field and the reason, and the offset
moves on. Offsets are committed only after the batch is stored and the rejections acknowledged,
so a crash replays the batch; upsert-by-version makes the replay harmless.

A record that would take its tenant above ``tenants.max_jobs`` is rejected the same way (field
``tenant``), decided in batch order inside the write (``jobs_apply(partial=True)``): the first
records that fit are stored, the ones after the tenant is full are not, the rest of the batch
is stored. Those rejections are produced after the write commits; a crash before they are
acknowledged replays the batch, which decides each such record again (stored records come back
``unchanged``), so none is lost.

Nothing is lost when the database or the broker fails mid-batch: the consumer is moved back to
the batch's first record of each partition before the error goes up, so the next round reads the
same records again (the planner loop retries after a pause). A record that decodes and passes
validation but is still refused by PostgreSQL (a check, a type, a NUL in a string) does not fail
its batch: the batch is written again one record per transaction, and the refused record goes to
``jobs.rejected`` with PostgreSQL's reason, while the others are stored.

With ``DUETIME_JOBS_TOPIC_SECRET`` set, only signed records pass, each changing its own tenant's
jobs (``guard``, ``duetime.jobs_guard``); the others go to ``jobs.rejected`` (field ``tenant``).

A consumed batch is written through the same bulk path as ``duetime jobs apply``
(``store.jobs.jobs_apply_clusters``: a few statements per batch, the same job twice in a batch
resolved in topic order) and logged once per batch; each job's outcome is logged at DEBUG only.

Several PostgreSQL clusters (docs/clusters.md): each job is written to its shard's cluster, one
transaction per cluster per batch, tenant quotas counted on every cluster under a lock in the
home cluster. A batch is not atomic across clusters: when one cluster's write fails, the parts
other clusters committed stay, and the rewind reads the whole batch again; applied again, those
records come back ``unchanged`` (versions decide), so nothing is lost or applied twice. A record
PostgreSQL refuses on one cluster is isolated as above, one record per transaction.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.errors import BusError, CodecError, DataRefused, InvalidInput
from duetime.events import JobRejected, JobTombstone
from duetime.logs import event
from duetime.model import JobDefinition
from duetime.schedule import ScheduleCache
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import JobWrite, jobs_apply_clusters
from duetime.store.store import StoredJob

from .guard import JobsTopicGuard

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
        clusters: ClusterStores,
        consumer: Consumer,
        producer: Producer,
        catalog: TopicCatalog,
        batch_size: int = 5000,
        guard: JobsTopicGuard | None = None,
    ) -> None:
        self.clusters = clusters
        self.consumer = consumer
        self.producer = producer
        self.catalog = catalog
        self.batch_size = batch_size
        self.cache = ScheduleCache()
        self.guard = guard
        consumer.subscribe([catalog.jobs])

    def run_once(self, timeout: float = 0.0) -> IngestStats:
        messages = self.consumer.consume(self.batch_size, timeout)
        if not messages:
            return IngestStats()
        try:
            return self._ingest(messages)
        except BaseException:
            # Not one record of the batch is lost: read them all again next round (those already
            # stored come back ``unchanged``, rejections already sent are sent again).
            self._rewind(messages)
            raise

    def _ingest(self, messages: list[Any]) -> IngestStats:
        accepted: list[JobDefinition | JobTombstone] = []
        sources: list[tuple[int, Any]] = []  # (position in the batch, message) of each accepted
        rejected: list[tuple[int, JobRejected]] = []
        for position, msg in enumerate(messages):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    event(log, "jobs.consume_error", logging.WARNING, error=err)
                continue
            try:
                accepted.append(self._decode(msg))
                sources.append((position, msg))
            except (CodecError, InvalidInput) as exc:
                field = exc.field if isinstance(exc, InvalidInput) else ""
                reason = exc.reason if isinstance(exc, InvalidInput) else str(exc)
                rejected.append((position, _rejection(msg, field, reason)))
        if self.guard is not None and accepted:
            accepted, sources = self._guard_owners(accepted, sources, rejected)
        stored = 0
        if accepted:
            writes = self._write(accepted)
            for (position, msg), write in zip(sources, writes, strict=True):
                if write.action == "over_quota":
                    rejected.append((position, _rejection(msg, "tenant", write.reason)))
                elif write.action == "refused":
                    rejected.append((position, _rejection(msg, "", write.reason)))
                else:
                    stored += 1
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
        if rejected:
            self._publish_rejections(
                [item for _position, item in sorted(rejected, key=itemgetter(0))]
            )
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # Only error events (e.g. partition EOF) in this batch: there is nothing to commit.
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise BusError(f"cannot commit jobs-topic offsets: {exc}") from exc
        return IngestStats(accepted=stored, rejected=len(rejected))

    def _write(self, items: list[JobDefinition | JobTombstone]) -> list[JobWrite]:
        """Store ``items`` in one transaction per cluster; when PostgreSQL refuses the data of
        one of them, one transaction per item instead, and the refused ones come back as
        ``refused`` (items another cluster already committed come back ``unchanged``)."""
        try:
            return jobs_apply_clusters(self.clusters, items, self.cache, partial=True)
        except DataRefused as batch_error:
            event(log, "jobs.batch_refused", logging.WARNING, records=len(items), error=batch_error)
        writes: list[JobWrite] = []
        for item in items:
            try:
                writes.extend(jobs_apply_clusters(self.clusters, [item], self.cache, partial=True))
            except DataRefused as exc:
                writes.append(JobWrite(item.job_id, "refused", item.version, str(exc)))
        return writes

    def _rewind(self, messages: list[Any]) -> None:
        first: dict[tuple[str, int], int] = {}
        for msg in messages:
            if msg.error() is None:
                key = (msg.topic(), msg.partition())
                first[key] = min(first.get(key, msg.offset()), msg.offset())
        for (topic, partition), offset in first.items():
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                # The partition went to another planner: it reads from the committed offset.
                event(log, "jobs.rewind_skipped", logging.WARNING, partition=partition, error=exc)

    def _decode(self, msg: Any) -> JobDefinition | JobTombstone:
        value = msg.value()
        if value is not None and len(value) > MAX_RECORD_BYTES:
            raise InvalidInput("", f"record of {len(value)} bytes exceeds {MAX_RECORD_BYTES}")
        item = JOB_DEFINITIONS.decode(value, msg.headers())
        key = msg.key()
        if key is not None and key.decode("utf-8", "replace") != item.job_id:
            raise InvalidInput("job_id", "does not match the record key")
        if self.guard is not None:
            self.guard.admit(msg, item)
        return item

    def _guard_owners(
        self,
        accepted: list[JobDefinition | JobTombstone],
        sources: list[tuple[int, Any]],
        rejected: list[tuple[int, JobRejected]],
    ) -> tuple[list[JobDefinition | JobTombstone], list[tuple[int, Any]]]:
        """Leave out (to ``rejected``) the records that would change another tenant's job."""
        assert self.guard is not None
        stored: dict[str, StoredJob] = {}
        for store, job_ids in self.clusters.split({item.job_id for item in accepted}, str):
            with store.tx() as tx:
                stored.update(tx.jobs_get_versions(job_ids))
        pairs = [(msg, item) for (_position, msg), item in zip(sources, accepted, strict=True)]
        refusals = self.guard.owner_refusals(pairs, stored)
        for index, reason in refusals.items():
            position, msg = sources[index]
            rejected.append((position, _rejection(msg, "tenant", reason)))
        keep = [i for i in range(len(accepted)) if i not in refusals]
        return [accepted[i] for i in keep], [sources[i] for i in keep]

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
