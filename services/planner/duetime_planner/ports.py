"""The planner's ports: what a planning round needs from the database, the bus and etcd.

``duetime.store.Store`` satisfies ``PlannerStore`` (its ``Tx`` satisfies ``PlannerTx``); a
confluent-kafka ``Producer`` satisfies ``RecordProducer``; ``duetime.coord.runner.OwnershipThread``
satisfies ``ShardOwner``. tests/fakes/planner_store.py and tests/fakes/producer.py are the
in-memory twins the unit tests plan against, with the same fence rules as sql/shards.sql.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from duetime.flow import TargetLimit
from duetime.store import InsertedRuns, NewRun, OccurrenceGap, ShardFence
from duetime.store.rows import DueJob, DueJobReader, OutboxRun

__all__ = ["PlannerStore", "PlannerTx", "RecordProducer", "ShardOwner"]


class PlannerTx(Protocol):
    """The statements of one planning transaction (sql/planner.sql, sql/shards.sql).

    ``tokens`` (shard -> fencing token) fences a write in etcd mode: a row of a shard whose
    stored token is another is not written. ``None`` (SKIP LOCKED mode) writes unfenced.
    """

    def db_now(self) -> datetime: ...

    def planner_tx_guard(self, idle_timeout: timedelta) -> datetime: ...

    def shards_fence(self, owner: str, tokens: Mapping[int, int]) -> ShardFence: ...

    def jobs_get_due_batch(
        self,
        shards: Sequence[int],
        horizon: datetime,
        limit: int,
        reader: DueJobReader | None = None,
    ) -> list[DueJob]: ...

    def jobs_due_histogram(
        self, shards: Sequence[int], horizon: datetime, bucket: timedelta, cap: int
    ) -> list[tuple[datetime, int]]: ...

    def runs_insert_many(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None = None
    ) -> set[uuid.UUID]: ...

    def runs_insert_publishing(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None, planner: str
    ) -> InsertedRuns: ...

    def publication_settle(
        self, publication_id: int, unconfirmed: Sequence[tuple[uuid.UUID, datetime]]
    ) -> int: ...

    def publications_recover(self, after: timedelta, limit: int = 100) -> int: ...

    def jobs_advance_many(
        self,
        advances: Sequence[tuple[str, datetime | None, datetime | None]],
        tokens: Mapping[int, int] | None = None,
    ) -> int: ...

    def jobs_cold_buckets(
        self, shards: Sequence[int], before: datetime, limit: int
    ) -> list[tuple[datetime, int]]: ...

    def jobs_cold_load(
        self, bucket: datetime, shards: Sequence[int], tokens: Mapping[int, int] | None = None
    ) -> int: ...

    def occurrence_gaps_insert(
        self, gaps: Sequence[OccurrenceGap], tokens: Mapping[int, int] | None = None
    ) -> None: ...

    def runs_ensure_partition(self, day: date) -> None: ...

    def runs_get_unpublished(self, horizon: datetime, limit: int) -> list[OutboxRun]: ...

    def runs_mark_published_many(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int: ...

    def runs_cancel_orphans(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int: ...

    def runs_sweep_lost(
        self,
        *,
        grace: timedelta,
        max_grace: timedelta,
        margin: timedelta,
        limit: int,
        scan_limit: int,
    ) -> list[tuple[uuid.UUID, str]]: ...

    def targets_limits(self) -> dict[str, TargetLimit]: ...

    def target_forecast_read(
        self, names: Sequence[str], first: int, last: int
    ) -> dict[tuple[str, int], int]: ...

    def target_forecast_add(self, added: Mapping[tuple[str, int], int]) -> None: ...

    def target_forecast_prune(self, before: int) -> None: ...

    def shards_claim(self, owner: str, tokens: Mapping[int, int]) -> set[int]: ...


class PlannerStore(Protocol):
    def tx(self) -> AbstractContextManager[PlannerTx]: ...


class RecordProducer(Protocol):
    """The part of confluent-kafka's ``Producer`` the outbox uses (``DeliveryTracker``)."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Any = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...


class ShardOwner(Protocol):
    """Which shards this planner may work, with their fencing tokens, at a monotonic instant:
    empty once its lease may have lapsed (``duetime.coord.ownership``)."""

    def current(self, now: float) -> Mapping[int, int]: ...
