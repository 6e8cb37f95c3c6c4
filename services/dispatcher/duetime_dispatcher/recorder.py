"""Record the Kafka fast path's successes in PostgreSQL, many runs per statement, after the fact.

When the job's topic acknowledged an emitted record, the run has succeeded; what is left is
bookkeeping: the run row goes to ``succeeded``, marked ``emitted`` (``runs_emitted`` in
``duetime/store/sql/dispatcher.sql``, one statement per batch; the attempt is the run row itself,
which readers see in the ``run_attempts_all`` view), and a RunResult record goes onto
``runs.results`` for downstream readers, as a worker would publish it. Completions are buffered
and written every ``interval`` on one database thread (the store is synchronous), so no
transaction sits between the due instant and the target.

Only once its row is written may the source record be acked: a crash between the emit and the
write re-delivers the due record and the run is emitted again, with the same idempotency key
(``run_id:attempt``). At-least-once, never exactly-once. A write that fails is retried after
``retry_interval``; until then the records stay unacked.

With several PostgreSQL clusters (``DUETIME_SHARD_MAP``) a run's row is in the cluster of its
job's shard: a flush writes each cluster's part of the buffer with that cluster's statements
(``clusters``), and a cluster that fails keeps only its own part buffered and unacked. The
flow-control tables and the clock probe stay with ``store``, the home cluster.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from confluent_kafka import Producer

from duetime.bus.records import RUN_RESULTS
from duetime.bus.result_encoding import ResultTemplate
from duetime.errors import StoreError
from duetime.flow import TargetLimit
from duetime.logs import event as log_event
from duetime.store.flow import GrantRequest

from .fast_path import Emission
from .holding import Release

__all__ = ["DispatcherStore", "EmittedRecorder", "RunClusters"]

T = TypeVar("T")
R = TypeVar("R")
Item = TypeVar("Item")

# The fast path's result records go out once releases have paused this long, or once the oldest
# waiting has waited the second (EmittedRecorder.results_may_go).
RESULTS_QUIET = timedelta(milliseconds=300)
RESULTS_MOST_WAIT = timedelta(seconds=1)

log = logging.getLogger("duetime.dispatcher")

#: (run_id, scheduled_for, attempt, started_at, finished_at, throttled_ms); the run id as its
#: canonical text; started_at is when the run was released (off the wheel, plus any throttled
#: wait).
EmittedRow = tuple[str, datetime, int, datetime, datetime, int]


class DispatcherStore(Protocol):
    """The database calls the dispatcher makes (``duetime.store.Store`` has them)."""

    def runs_emitted(self, worker: str, emitted: Sequence[EmittedRow]) -> set[tuple[str, int]]: ...

    def runs_handled(
        self, attempts: Sequence[tuple[uuid.UUID, datetime, int]]
    ) -> set[tuple[uuid.UUID, int]]: ...

    def db_clock(self) -> datetime: ...

    def targets_grant(self, requests: Sequence[GrantRequest]) -> dict[str, int]: ...

    def flow_settings(self) -> tuple[dict[str, TargetLimit], dict[str, int]]: ...

    def targets_report_waiting(self, dispatcher: str, waiting: Mapping[str, int]) -> None: ...


class RunClusters(Protocol):
    """The clusters runs live in (``duetime.store.clusters.ClusterStores``)."""

    def split(
        self, items: Iterable[T], job_id: Callable[[T], str]
    ) -> Sequence[tuple[DispatcherStore, list[T]]]:
        """``items`` as (store, the items of its cluster) pairs, by each item's job id."""
        ...


@dataclass(eq=False, slots=True)
class _Done(Generic[T]):  # not frozen: one per emitted run, and frozen __init__ is slow
    release: Release[T]
    emission: Emission
    finished_at: datetime

    def row(self) -> EmittedRow:
        run, release = self.emission, self.release
        released = release.taken_at + timedelta(milliseconds=release.throttled_ms)
        return (
            run.run_key.decode("ascii"),
            run.scheduled_for,
            run.attempt,
            released,
            self.finished_at,
            release.throttled_ms,
        )


class EmittedRecorder(Generic[T]):
    """Buffers emitted runs; :meth:`flush` writes them and returns the releases to settle.

    Args:
        store: the home cluster: the flow-control tables, the database clock, and with one
            cluster ``runs_emitted`` too.
        results: a producer for ``runs.results`` (fire and forget: the database is authoritative).
        results_topic: the ``runs.results`` topic.
        worker_id: what the run rows name as their worker (``dispatcher:<host>-<pid>``).
        chunk: the most rows per statement.
        clusters: with several clusters, where each run's ``runs_emitted`` goes (None: ``store``).
    """

    def __init__(
        self,
        store: DispatcherStore,
        results: Producer,
        results_topic: str,
        worker_id: str,
        *,
        chunk: int = 5000,
        clusters: RunClusters | None = None,
    ) -> None:
        self._store = store
        self._clusters = clusters
        self._results = results
        self._results_topic = results_topic
        self.worker_id = worker_id
        self._chunk = chunk
        self._pending: list[_Done[T]] = []
        # Recorded runs whose result record is not out yet: published by publish_results(),
        # which the dispatcher calls when results_may_go() says (see there).
        self._results_due: list[_Done[T]] = []
        self._results_waiting_since: datetime | None = None
        self._db = ThreadPoolExecutor(1, thread_name_prefix="dispatcher-db")
        # Every result it announces: this worker, outcome and state succeeded (RunResult's
        # bytes, written directly: duetime/bus/result_encoding.py).
        self._succeeded = ResultTemplate(worker=worker_id, outcome="succeeded", state="succeeded")
        self._headers = RUN_RESULTS.headers()
        self.recorded = 0
        self.already_handled = 0
        self.write_failures = 0

    def add(self, release: Release[T], emission: Emission, finished_at: datetime) -> None:
        """The job's topic acknowledged ``release``'s record at ``finished_at``."""
        self._pending.append(_Done(release, emission, finished_at))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def results_may_go(self, now: datetime, last_release: datetime) -> bool:
        """Whether the result records waiting go out now (:meth:`publish_results`): once the
        releases, the last at ``last_release``, paused for ``RESULTS_QUIET``, or once the oldest
        of them waited ``RESULTS_MOST_WAIT``, so that releases that never pause that long (a
        run due every few ms) do not hold them, and their memory, for ever. "Oldest" counts
        from the first round that found some waiting after none were."""
        if not self._results_due:
            self._results_waiting_since = None
            return False
        since = self._results_waiting_since
        if since is None:
            since = self._results_waiting_since = now
        return now - last_release >= RESULTS_QUIET or now - since >= RESULTS_MOST_WAIT

    async def flush(self) -> list[Release[T]]:
        """Write what is buffered; returns the releases whose source records may now be acked
        (none if the write failed: they stay buffered and are tried again next time)."""
        if not self._pending:
            return []
        batch, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        unwritten, error = await loop.run_in_executor(self._db, self._write, batch)
        if not unwritten:
            return [done.release for done in batch]
        self.write_failures += 1
        self._pending[:0] = unwritten
        log_event(
            log,
            "runs.emitted_write_failed",
            logging.WARNING,
            count=len(unwritten),
            reason=str(error),
        )
        kept = set(unwritten)
        return [done.release for done in batch if done not in kept]

    async def handled(self, runs: Sequence[Emission]) -> set[tuple[uuid.UUID, int]]:
        """Of ``runs`` (each an attempt about to be emitted), the (run_id, attempt) whose run is
        already past that attempt, asked of each run's cluster on the database thread. Raises
        ``StoreError`` when a cluster cannot answer."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, self._handled, runs)

    def _handled(self, runs: Sequence[Emission]) -> set[tuple[uuid.UUID, int]]:
        found: set[tuple[uuid.UUID, int]] = set()
        for store, part in self._by_cluster(runs, lambda run: run.job_id):
            found |= store.runs_handled([(r.run_id, r.scheduled_for, r.attempt) for r in part])
        return found

    def _by_cluster(
        self, items: Sequence[Item], job_id: Callable[[Item], str]
    ) -> Sequence[tuple[DispatcherStore, Sequence[Item]]]:
        """``items`` as (store, the items of its cluster) pairs, by each item's job id."""
        if self._clusters is None:
            return [(self._store, items)]
        return self._clusters.split(items, job_id)

    async def on_db(self, call: Callable[[DispatcherStore], R]) -> R:
        """Run ``call(store)`` on the database thread (one at a time with the writes)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, call, self._store)

    @property
    def results_due(self) -> int:
        return len(self._results_due)

    async def publish_results(self, limit: int) -> int:
        """Publish up to ``limit`` of the result records still due, on the database thread.

        A spike's results are not published while it is being released: 100k result records
        at the due instant, and every consumer of ``runs.results`` reading them, would compete
        for the broker and the cores with the releases and the targets' consumers (single runs
        of a 20k Kafka spike here: start lateness p50 314 ms with the results at once, 234 ms
        with none published). They are for downstream readers (the database is
        authoritative), so they follow a moment later instead."""
        if not self._results_due:
            return 0
        batch, self._results_due = self._results_due[:limit], self._results_due[limit:]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._db, self._publish_results, batch)
        return len(batch)

    def _publish_results(self, batch: Sequence[_Done[T]]) -> None:
        for done in batch:
            self._publish_result(done)
        self._results.poll(0)

    def close(self, timeout: timedelta) -> None:
        self._db.shutdown(wait=True)
        self._publish_results(self._results_due)
        self._results_due = []
        self._results.flush(timeout.total_seconds())

    def _write(self, batch: Sequence[_Done[T]]) -> tuple[list[_Done[T]], StoreError | None]:
        """On the database thread, each cluster's part in its own statements; returns what
        could not be written (the parts of the clusters that failed) and the last error."""
        unwritten: list[_Done[T]] = []
        error: StoreError | None = None
        for store, part in self._by_cluster(batch, lambda done: done.emission.job_id):
            try:
                self._write_part(store, part)
            except StoreError as exc:  # this cluster's part stays buffered; the others go on
                unwritten.extend(part)
                error = exc
        return unwritten, error

    def _write_part(self, store: DispatcherStore, batch: Sequence[_Done[T]]) -> None:
        """One statement per chunk, then the result records of the chunk are due."""
        for start in range(0, len(batch), self._chunk):
            chunk = batch[start : start + self._chunk]
            rows = [done.row() for done in chunk]
            recorded = store.runs_emitted(self.worker_id, rows)
            self.recorded += len(recorded)
            self.already_handled += len(chunk) - len(recorded)
            for done, row in zip(chunk, rows, strict=True):
                if (row[0], row[2]) in recorded:
                    self._results_due.append(done)

    def _publish_result(self, done: _Done[T]) -> None:
        run = done.emission
        value = self._succeeded.encode(
            run.run_key.decode("ascii"),
            run.job_id,
            run.tenant,
            run.target_service,
            run.scheduled_for,
            run.attempt,
            done.release.taken_at,
            done.finished_at,
        )
        key = run.run_key
        while True:
            try:
                self._results.produce(self._results_topic, value, key, headers=self._headers)
                return
            except BufferError:
                self._results.poll(0.05)
