"""The PostgreSQL store: one method per named query, driver errors translated here.

``Store.tx()`` opens a transaction and yields a ``Tx`` whose methods run inside it, so a service
can do "scan, insert runs, advance jobs" atomically. Standalone helpers open their own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError

from duetime.cold_tier import DEFAULT_HOT_HORIZON
from duetime.errors import DataRefused, StoreError
from duetime.flow import TargetLimit

from . import flow
from .arrays import flags, instants, numbers, uuids
from .attempts import (
    AttemptEnd,
    Claim,
    ClaimDeferred,
    ClaimRequest,
    LeaseRenewal,
    Unclaim,
    claim_batch,
    complete_batch,
    renew_batch,
    unclaim_batch,
)
from .engine import make_engine
from .flow import GrantRequest
from .queries import query
from .rows import (
    DUE_BATCH_COLUMNS,
    DueJob,
    DueJobReader,
    ExpiredLease,
    OutboxRun,
    batch_json,
    batch_json_shared,
    iso_or_none,
    retry_from_row,
    target_from_json,
)

__all__ = ["InsertedRuns", "NewRun", "ShardFence", "ShardOwnerRow", "Store", "StoredJob", "Tx"]


@dataclass(slots=True)
class NewRun:
    """A run to insert. Not frozen, for speed alone (the planner makes one per run; a frozen
    dataclass's ``__init__`` costs three times as much); nothing assigns to one once made."""

    run_id: uuid.UUID
    job_id: str
    tenant: str
    target_service: str
    scheduled_for: datetime
    due_at: datetime
    max_attempts: int
    # The job's shard, which fences the insert in etcd mode (sql/shards.sql).
    shard_id: int = 0
    # Inserted already marked published, provisionally (runs_insert_publishing): the planner
    # publishes it right after the commit.
    published: bool = False


@dataclass(frozen=True)
class InsertedRuns:
    """What runs_insert_publishing created: the new runs' ids, and the publication row holding
    those inserted marked published (None: none were)."""

    inserted: set[uuid.UUID]
    publication_id: int | None


@dataclass(frozen=True)
class OccurrenceGap:
    """Occurrences of a job in [first_at, end_at) left out on purpose (the occurrence ledger):
    ``catch_up`` (the policy ``once`` or ``skip``), ``max_catch_up`` (``all``'s bound) or
    ``paused``."""

    job_id: str
    first_at: datetime
    end_at: datetime
    reason: str
    policy: str | None = None
    shard_id: int = 0  # fences the insert in etcd mode, as NewRun's


@dataclass(frozen=True)
class Ledger:
    """What ``duetime runs list --all-occurrences`` reads for a job in [since, until)."""

    job: Any
    runs: Sequence[Any]
    gaps: Sequence[Any]


@dataclass(frozen=True)
class ShardFence:
    """What ``shards_fence`` decided for a planning transaction: the shards it may write for
    (locked until it ends) and those a newer owner holds (the refusal is counted)."""

    held: frozenset[int]
    refused: frozenset[int]


@dataclass(frozen=True)
class ShardOwnerRow:
    """A shard's fence row: the highest token it was claimed with, and refusals."""

    shard_id: int
    token: int
    owner: str
    claimed_at: datetime
    rejected: int
    last_rejected_at: datetime | None
    last_rejected_owner: str | None


@dataclass(frozen=True)
class StoredJob:
    """What a job write needs of a stored job: its version and its tenant (for quotas)."""

    version: int
    tenant: str


class Tx:
    """Query methods bound to one open transaction.

    ``hot_horizon``: every statement that writes ``next_run_at`` puts a job whose next run lies
    beyond it in the cold tier (duetime/cold_tier.py).
    """

    def __init__(self, conn: Connection, hot_horizon: timedelta = DEFAULT_HOT_HORIZON) -> None:
        self.conn = conn
        self.hot_horizon = hot_horizon
        self._hot_horizon_s = hot_horizon.total_seconds()

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> Sequence[Any]:
        return self.conn.execute(query(name), params or {}).all()

    def _exec(self, name: str, params: dict[str, Any] | list[dict[str, Any]]) -> int:
        return self.conn.execute(query(name), params).rowcount

    def db_now(self) -> datetime:
        now: datetime = self._rows("db_now")[0].now
        return now

    # jobs -----------------------------------------------------------------------------------
    def jobs_pause(self, job_id: str) -> int | None:
        rows = self._rows("jobs_pause", {"job_id": job_id})
        return int(rows[0].version) if rows else None

    def jobs_get_schedule(self, job_id: str) -> Any | None:
        rows = self._rows("jobs_get_schedule", {"job_id": job_id})
        return rows[0] if rows else None

    def jobs_resume(self, job_id: str, next_run_at: datetime | None) -> int | None:
        params = {"job_id": job_id, "next_run_at": next_run_at}
        rows = self._rows("jobs_resume", params | {"hot_horizon_s": self._hot_horizon_s})
        return int(rows[0].version) if rows else None

    def jobs_remove(self, job_id: str) -> bool:
        return bool(self._rows("jobs_remove", {"job_id": job_id}))

    # runs -----------------------------------------------------------------------------------
    def runs_insert(self, runs: Sequence[NewRun]) -> None:
        if runs:
            self._exec("runs_insert", [asdict(r) for r in runs])

    def runs_ensure_partition(self, day: date) -> None:
        self._rows("runs_ensure_partition", {"day": day})

    def runs_get_unpublished(self, horizon: datetime, limit: int) -> list[OutboxRun]:
        rows = self._rows("runs_get_unpublished", {"horizon": horizon, "limit": limit})
        return [
            OutboxRun(
                run_id=r.run_id,
                job_id=r.job_id,
                tenant=r.tenant,
                target_service=r.target_service,
                scheduled_for=r.scheduled_for,
                due_at=r.due_at,
                attempt=r.attempt,
                max_attempts=r.max_attempts,
                target=None if r.job_missing else target_from_json(r.target),
                lease=timedelta(milliseconds=r.lease_ms or 60_000),
                heartbeat_interval=timedelta(milliseconds=r.heartbeat_ms or 20_000),
                retry=retry_from_row(r, r.max_attempts),
            )
            for r in rows
        ]

    def runs_get_expired(self, limit: int) -> list[ExpiredLease]:
        return [ExpiredLease.from_row(r) for r in self._rows("runs_get_expired", {"limit": limit})]

    def runs_get_dead_unpublished(self, limit: int) -> Sequence[Any]:
        return self._rows("runs_get_dead_unpublished", {"limit": limit})

    def runs_mark_dead_published(self, run_id: uuid.UUID, scheduled_for: datetime) -> None:
        self._exec("runs_mark_dead_published", {"run_id": run_id, "scheduled_for": scheduled_for})

    # planner bulk --- one statement per batch; a batch is one JSON parameter (sql/planner.sql).
    def jobs_get_versions(self, job_ids: Sequence[str]) -> dict[str, StoredJob]:
        rows = self._rows("jobs_get_versions", {"job_ids": batch_json(list(job_ids))})
        return {r.job_id: StoredJob(int(r.version), r.tenant) for r in rows}

    def jobs_get_due_batch(
        self,
        shards: Sequence[int],
        horizon: datetime,
        limit: int,
        reader: DueJobReader | None = None,
    ) -> list[DueJob]:
        """Like ``jobs_get_due``, for batches of thousands (see the query's note). ``reader``:
        the caller's, which parses each job's definition once while it stays the same."""
        params = {"shards": list(shards), "horizon": horizon, "limit": limit, "pick": 2 * limit}
        result = self.conn.execute(query("jobs_get_due_batch"), params)
        if tuple(result.keys()) != DUE_BATCH_COLUMNS:  # the reader reads rows by position
            raise RuntimeError(f"jobs_get_due_batch returns {tuple(result.keys())}")
        read = DueJob.from_row if reader is None else reader.read
        return [read(r) for r in result.all()]

    def jobs_upsert_many(self, records: Sequence[dict[str, Any]]) -> set[str]:
        """Upsert ``rows.job_record`` objects; returns the job_ids stored (created or updated)."""
        if not records:
            return set()
        return self.jobs_upsert_encoded(batch_json_shared(records))

    def jobs_upsert_encoded(self, batch: tuple[str, str]) -> set[str]:
        """``jobs_upsert_many`` of records already encoded by ``rows.batch_json_shared``."""
        rows, shared = batch
        params = {"rows": rows, "shared": shared, "hot_horizon_s": self._hot_horizon_s}
        return {r.job_id for r in self._rows("jobs_upsert_many", params)}

    def jobs_delete_many(self, tombstones: Sequence[tuple[str, int]]) -> set[str]:
        """Delete each (job_id, version) whose stored version is older; returns those deleted."""
        if not tombstones:
            return set()
        rows = [{"job_id": job_id, "version": version} for job_id, version in tombstones]
        return {r.job_id for r in self._rows("jobs_delete_many", {"rows": batch_json(rows)})}

    def jobs_estimated_rows(self) -> int:
        return max(0, int(self._rows("jobs_estimated_rows")[0].estimated))

    def jobs_analyze(self) -> None:
        self.conn.execute(query("jobs_analyze"))

    def jobs_advance_many(
        self,
        advances: Sequence[tuple[str, datetime | None, datetime | None]],
        tokens: Mapping[int, int] | None = None,
    ) -> int:
        """Move each (job_id, next_run_at, last scheduled_for) in one statement; returns how
        many moved. With ``tokens`` (shard -> fencing token) a job moves only while its shard's
        stored token is the given one."""
        if not advances:
            return 0
        rows = [
            {
                "job_id": job_id,
                "next_run_at": iso_or_none(nxt),
                "last_scheduled_for": iso_or_none(last),
            }
            for job_id, nxt, last in advances
        ]
        params = {
            "rows": batch_json(rows),
            "tokens": _tokens_json(tokens),
            "hot_horizon_s": self._hot_horizon_s,
        }
        return self._exec("jobs_advance_many", params)

    # the cold tier's loader (sql/cold.sql) ---------------------------------------------------
    def jobs_cold_buckets(
        self, shards: Sequence[int], before: datetime, limit: int
    ) -> list[tuple[datetime, int]]:
        """(bucket, jobs) of the cold buckets of ``shards`` starting before ``before``."""
        params = {"shards": list(shards), "before": before, "limit": limit}
        return [(r.bucket, int(r.jobs)) for r in self._rows("jobs_cold_buckets", params)]

    def jobs_cold_load(
        self, bucket: datetime, shards: Sequence[int], tokens: Mapping[int, int] | None = None
    ) -> int:
        """Make ``bucket``'s jobs of ``shards`` hot; returns how many. With ``tokens`` only
        those of shards whose stored fencing token is the given one."""
        params = {"bucket": bucket, "shards": list(shards), "tokens": _tokens_json(tokens)}
        return self._exec("jobs_cold_load", params)

    def occurrence_gaps_insert(
        self, gaps: Sequence[OccurrenceGap], tokens: Mapping[int, int] | None = None
    ) -> None:
        """Record the gaps of a planning round in one statement (fenced like its runs)."""
        if not gaps:
            return
        rows = [
            {
                "job_id": g.job_id,
                "first_at": g.first_at.isoformat(),
                "end_at": g.end_at.isoformat(),
                "reason": g.reason,
                "policy": g.policy,
                "shard_id": g.shard_id,
            }
            for g in gaps
        ]
        self._exec(
            "occurrence_gaps_insert", {"rows": batch_json(rows), "tokens": _tokens_json(tokens)}
        )

    def jobs_due_histogram(
        self, shards: Sequence[int], horizon: datetime, bucket: timedelta, cap: int
    ) -> list[tuple[datetime, int]]:
        """(bucket end, jobs due in it) up to ``horizon``, for the earliest ``cap`` due jobs."""
        params = {
            "shards": list(shards),
            "horizon": horizon,
            "bucket_seconds": bucket.total_seconds(),
            "cap": cap,
        }
        return [(r.bucket_end, int(r.jobs)) for r in self._rows("jobs_due_histogram", params)]

    def runs_insert_many(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None = None
    ) -> set[uuid.UUID]:
        """Insert in one statement; returns the run ids that were new (the others existed, or
        their shard's stored fencing token is not the one in ``tokens``)."""
        return self._insert_runs(runs, tokens, None).inserted

    def runs_insert_publishing(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None, planner: str
    ) -> InsertedRuns:
        """runs_insert_many, and for the new runs marked ``published``: one publication row
        holding their keys, written by the same statement, which the planner settles once the
        broker answered (publication_settle) or any planner recovers (publications_recover)."""
        return self._insert_runs(runs, tokens, planner)

    def _insert_runs(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None, planner: str | None
    ) -> InsertedRuns:
        if not runs:
            return InsertedRuns(set(), None)
        params = {
            "run_ids": uuids([r.run_id for r in runs]),
            "scheduled_fors": instants([r.scheduled_for for r in runs]),
            "due_ats": instants([r.due_at for r in runs]),
            "max_attempts": numbers([r.max_attempts for r in runs]),
            "shard_ids": numbers([r.shard_id for r in runs]),
            "published": flags([r.published and planner is not None for r in runs]),
            "job_ids": batch_json([r.job_id for r in runs]),
            "tenants": batch_json([r.tenant for r in runs]),
            "target_services": batch_json([r.target_service for r in runs]),
            "tokens": _tokens_json(tokens),
            "planner": planner,
        }
        found = self._rows("runs_insert_many", params)
        publication = found[0].publication_id if found else None
        return InsertedRuns({r.run_id for r in found}, publication)

    def publication_settle(
        self, publication_id: int, unconfirmed: Sequence[tuple[uuid.UUID, datetime]]
    ) -> int:
        """End a publication: unmark its runs the broker did not acknowledge (``unconfirmed``),
        so the outbox publishes them again; returns how many were unmarked."""
        unmarked = self._run_keys("runs_unmark_published", unconfirmed)
        self._exec("publication_delete", {"publication_id": publication_id})
        return unmarked

    def publications_recover(self, after: timedelta, limit: int = 100) -> int:
        """Unmark the runs of publications no planner settled within ``after`` of their commit
        (their planner died or lost the database meanwhile); returns the runs unmarked."""
        stale = self._rows(
            "publications_take_stale", {"after_s": after.total_seconds(), "limit": limit}
        )
        keys = [k for p in stale for k in zip(p.run_ids, p.scheduled_fors, strict=True)]
        return self._run_keys("runs_unmark_published", keys)

    # capacity forecast --- the planner's placement of windowed runs (duetime.capacity).
    def targets_limits(self) -> dict[str, TargetLimit]:
        return flow.limits(self.conn)

    def target_forecast_read(
        self, names: Sequence[str], first: int, last: int
    ) -> dict[tuple[str, int], int]:
        return flow.forecast_read(self.conn, names, first, last)

    def target_forecast_add(self, added: Mapping[tuple[str, int], int]) -> None:
        flow.forecast_add(self.conn, added)

    def target_forecast_prune(self, before: int) -> None:
        flow.forecast_prune(self.conn, before)

    # shard fence --- sql/shards.sql, docs/failover.md.
    def planner_tx_guard(self, idle_timeout: timedelta) -> datetime:
        """The database clock, and a short idle-in-transaction timeout for this transaction."""
        idle_ms = int(idle_timeout.total_seconds() * 1000)
        now: datetime = self._rows("planner_tx_guard", {"idle_ms": idle_ms})[0].now
        return now

    def shards_claim(self, owner: str, tokens: Mapping[int, int]) -> set[int]:
        """Raise each shard's stored token to the given one (only from a lower one)."""
        if not tokens:
            return set()
        params = {"owner": owner, "tokens": _tokens_json(tokens)}
        return {int(r.shard_id) for r in self._rows("shards_claim", params)}

    def shards_fence(self, owner: str, tokens: Mapping[int, int]) -> ShardFence:
        """Lock the shards still held under ``tokens`` for this transaction; count refusals."""
        if not tokens:
            return ShardFence(frozenset(), frozenset())
        rows = self._rows("shards_fence", {"owner": owner, "tokens": _tokens_json(tokens)})
        return ShardFence(
            held=frozenset(int(r.shard_id) for r in rows if r.held),
            refused=frozenset(int(r.shard_id) for r in rows if not r.held),
        )

    def shard_owners_list(self) -> list[ShardOwnerRow]:
        return [ShardOwnerRow(**r._mapping) for r in self._rows("shard_owners_list")]

    def runs_mark_published_many(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        """Mark (run_id, scheduled_for) published and count the publication."""
        return self._run_keys("runs_mark_published_many", keys)

    def runs_cancel_orphans(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        """Cancel scheduled runs whose job is gone."""
        return self._run_keys("runs_cancel_orphans", keys)

    def _run_keys(self, name: str, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        if not keys:
            return 0
        rows = [{"run_id": str(run_id), "scheduled_for": sf.isoformat()} for run_id, sf in keys]
        return self._exec(name, {"rows": batch_json(rows)})

    def runs_sweep_lost(
        self,
        *,
        grace: timedelta,
        max_grace: timedelta,
        margin: timedelta,
        limit: int,
        scan_limit: int,
    ) -> list[tuple[uuid.UUID, str]]:
        """Make lost runs publishable again: (run_id, reason) per run, at most ``limit``."""
        rows = self._rows(
            "runs_sweep_lost",
            {
                "grace_seconds": grace.total_seconds(),
                "max_grace_seconds": max_grace.total_seconds(),
                "margin_seconds": margin.total_seconds(),
                "limit": limit,
                "scan_limit": scan_limit,
            },
        )
        return [(r.run_id, r.reason) for r in rows]


def _tokens_json(tokens: Mapping[int, int] | None) -> str | None:
    if tokens is None:
        return None
    return batch_json([{"shard_id": s, "token": t} for s, t in sorted(tokens.items())])


class Store:
    """Owns the engine; ``tx()`` gives a transaction, the shortcuts below run one each."""

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 5,
        application_name: str = "duetime",
        hot_horizon: timedelta = DEFAULT_HOT_HORIZON,
    ):
        self.engine: Engine = make_engine(
            database_url, pool_size=pool_size, application_name=application_name
        )
        self.hot_horizon = hot_horizon

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        try:
            with self.engine.begin() as conn:
                yield Tx(conn, self.hot_horizon)
        except (DataError, IntegrityError) as exc:
            raise DataRefused(f"database refused the data: {_first_line(exc)}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc

    # Flow control (flow.py): per-target limits shared by every dispatcher. -----------------
    def targets_grant(self, requests: Sequence[GrantRequest]) -> dict[str, int]:
        with self.tx() as tx:
            return flow.grant(tx.conn, requests)

    def flow_settings(self) -> tuple[dict[str, TargetLimit], dict[str, int]]:
        """Every target's own limits (``*`` = the default) and every tenant's weight."""
        with self.tx() as tx:
            return flow.limits(tx.conn), flow.weights(tx.conn)

    def targets_report_waiting(self, dispatcher: str, waiting: Mapping[str, int]) -> None:
        with self.tx() as tx:
            flow.report_waiting(tx.conn, dispatcher, waiting)

    # Worker operations: one statement per batch (attempts.py); the single-run forms are
    # one-element batches, for tools and the reaper's tests. ----------------------------------
    def runs_claim_batch(
        self, worker: str, requests: Sequence[ClaimRequest]
    ) -> dict[uuid.UUID, Claim | ClaimDeferred]:
        with self.tx() as tx:
            return claim_batch(tx.conn, worker, requests)

    def runs_unclaim_batch(self, unclaims: Sequence[Unclaim]) -> set[uuid.UUID]:
        with self.tx() as tx:
            return unclaim_batch(tx.conn, unclaims)

    def runs_renew_batch(self, renewals: Sequence[LeaseRenewal]) -> dict[uuid.UUID, datetime]:
        with self.tx() as tx:
            return renew_batch(tx.conn, renewals)

    def runs_complete_batch(self, worker: str, ends: Sequence[AttemptEnd]) -> set[uuid.UUID]:
        with self.tx() as tx:
            return complete_batch(tx.conn, worker, ends)

    def runs_claim(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        attempt: int,
        worker: str,
        lease: timedelta,
        *,
        released_at: datetime | None = None,
        throttled_ms: int | None = None,
    ) -> Claim | None:
        token = uuid.uuid4()
        request = ClaimRequest(
            run_id, scheduled_for, attempt, token, lease, released_at, throttled_ms
        )
        claim = self.runs_claim_batch(worker, [request]).get(token)
        return claim if isinstance(claim, Claim) else None  # not ahead: never deferred

    def runs_complete(
        self,
        *,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        attempt: int,
        worker: str,
        lease_token: uuid.UUID,
        state: str,
        outcome: str,
        error: str | None = None,
        status_code: int | None = None,
        retry_delay: timedelta = timedelta(0),
    ) -> bool:
        """Fenced completion: True if accepted; False (and recorded) if the lease was lost."""
        end = AttemptEnd(
            run_id,
            scheduled_for,
            attempt,
            lease_token,
            state,
            outcome,
            error,
            status_code,
            retry_delay,
        )
        return lease_token in self.runs_complete_batch(worker, [end])

    # Read side for the CLI and tests. --------------------------------------------------------
    def jobs_list(self, limit: int = 1000) -> Sequence[Any]:
        with self.tx() as tx:
            return tx._rows("jobs_list", {"limit": limit})

    def runs_list(self, job_id: str | None = None, limit: int = 1000) -> Sequence[Any]:
        with self.tx() as tx:
            return tx._rows("runs_list", {"job_id": job_id, "limit": limit})

    def ledger(self, job_id: str, since: datetime, until: datetime) -> Ledger | None:
        """A job's schedule, and its runs and gaps in [since, until) (None: no such job)."""
        params = {"job_id": job_id, "since": since, "until": until}
        with self.tx() as tx:
            jobs = tx._rows("ledger_job", {"job_id": job_id})
            if not jobs:
                return None
            return Ledger(jobs[0], tx._rows("ledger_runs", params), tx._rows("ledger_gaps", params))

    def run_attempts_list(self, run_id: uuid.UUID) -> Sequence[Any]:
        with self.tx() as tx:
            return tx._rows("run_attempts_list", {"run_id": run_id})

    # dispatcher ------------------------------------------------------------------------------
    def runs_emitted(
        self,
        worker: str,
        emitted: Sequence[tuple[str, datetime, int, datetime, datetime, int]],
    ) -> set[tuple[str, int]]:
        """Record Kafka-target runs the dispatcher emitted itself as succeeded, in one statement
        (``dispatcher.sql``). ``emitted``: (run_id, scheduled_for, attempt, started_at = released
        at, finished_at, throttled_ms), the run id as its canonical text (what the dispatcher
        holds; no ``uuid.UUID`` either way). Returns the (run_id, attempt) it recorded, the id
        as the same text; the others had already been handled (a worker, or this same record
        earlier) and are left alone."""
        if not emitted:
            return set()
        # Array literals, not lists (duetime/store/arrays.py): the driver would adapt the lists
        # element by element, under the GIL the dispatcher's intake needs.
        with self.tx() as tx:
            rows = tx._rows(
                "runs_emitted",
                {
                    "worker": worker,
                    "run_ids": uuids(e[0] for e in emitted),
                    "scheduled_fors": instants(e[1] for e in emitted),
                    "attempts": numbers(e[2] for e in emitted),
                    "started_ats": instants(e[3] for e in emitted),
                    "finished_ats": instants(e[4] for e in emitted),
                    "throttled_ms": numbers(e[5] for e in emitted),
                },
            )
        return {(row.run_id, row.attempt) for row in rows}

    def runs_handled(
        self, attempts: Sequence[tuple[uuid.UUID, datetime, int]]
    ) -> set[tuple[uuid.UUID, int]]:
        """Of ``attempts`` (run_id, scheduled_for, attempt), the (run_id, attempt) whose run is
        already past that attempt (``dispatcher.sql``): executing it again would repeat it."""
        if not attempts:
            return set()
        with self.tx() as tx:
            rows = tx._rows(
                "runs_handled",
                {
                    "run_ids": uuids(a[0] for a in attempts),
                    "scheduled_fors": instants(a[1] for a in attempts),
                    "attempts": numbers(a[2] for a in attempts),
                },
            )
        return {(row.run_id, row.attempt) for row in rows}

    def db_clock(self) -> datetime:
        """The database clock right now (``clock_timestamp()``), for the dispatcher's offset."""
        with self.tx() as tx:
            now: datetime = tx._rows("db_clock")[0].now
        return now


def _first_line(exc: SQLAlchemyError) -> str:
    """The driver's message without SQLAlchemy's statement and parameters (they may be long, and
    they hold the data being refused)."""
    orig = getattr(exc, "orig", None)
    return (str(orig) if orig is not None else str(exc)).strip().splitlines()[0]
