"""Writing job definitions: one transaction for a whole batch, versions resolved, next run computed.

Used by ``duetime jobs apply`` and by the planner's ingest of the jobs topic, so both follow the
same rules: a definition replaces the stored one only if its version is newer; a definition
without a version (0) becomes "stored version + 1"; next_run_at is recomputed only when the
schedule changed.

A batch costs a handful of statements per ``CHUNK_SIZE`` jobs (one version lookup, one delete of
the tombstoned, one upsert), never statements per job: 100k definitions are a few dozen round
trips. The same job_id may appear several times in one batch (the jobs topic carries every edit);
the items are resolved in Python first, **as if applied one after another in batch order**, so the
outcome is exactly that of the one-by-one path: the highest version wins, an equal or older one
is ``unchanged``, a version-0 item is "the version before it + 1", and a tombstone followed by a
re-definition re-creates the job. Only each job's final state is written (``ON CONFLICT`` cannot
touch a row twice in one statement). One simplification: next_run_at is recomputed by comparing
the final schedule with the stored one, so a batch that changes a schedule and changes it back
keeps the stored next_run_at (which is right for that schedule).

Tenant quotas (``tenants.max_jobs``, docs/flow-control.md "Tenants") are decided in the same
in-memory pass, item by item in batch order: an item that would bring a job into a tenant (a
new job, or a job moved from another tenant) while the tenant already has ``max_jobs`` is
refused and leaves the job as it was, so the items after it resolve as if it had never been
there. Updates that keep a job's tenant and deletes are never refused, so a tenant above a
lowered quota can still change and remove its jobs. The counts come from ``tenants.quotas_lock``
inside the write transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

from duetime.errors import NotFound, QuotaExceeded
from duetime.events import JobTombstone
from duetime.model import JobDefinition
from duetime.planning import initial_next_run_at
from duetime.schedule import ScheduleCache, ScheduleSpec

from .clusters import ClusterStores
from .rows import batch_json_shared, iso_or_none, job_record, spec_from_row
from .store import StoredJob, Tx
from .tenants import TenantQuota, jobs_per_tenant, quota_limits_lock, quotas_lock

__all__ = [
    "CHUNK_SIZE",
    "BatchPlan",
    "JobWrite",
    "QuotaRefusal",
    "jobs_apply",
    "jobs_apply_clusters",
    "jobs_set_paused",
    "resolve_batch",
]

_T = TypeVar("_T")

# Rows per statement: large enough that round trips vanish, small enough that one statement's
# parameters stay a few megabytes.
CHUNK_SIZE = 5000


@dataclass(frozen=True)
class JobWrite:
    job_id: str
    # created | updated | unchanged (stale version) | deleted | not_found | over_quota, and
    # refused (the jobs-topic ingest: PostgreSQL refused the record alone)
    action: str
    version: int
    reason: str = ""  # over_quota: the tenant, its max_jobs and its jobs


@dataclass(frozen=True)
class QuotaRefusal:
    """Item ``index`` would have brought a job into ``tenant``, which had ``jobs`` of its
    ``max_jobs`` at that point of the batch."""

    index: int
    tenant: str
    max_jobs: int
    jobs: int

    @property
    def reason(self) -> str:
        return f"tenant {self.tenant} may have at most {self.max_jobs} jobs and has {self.jobs}"


@dataclass(frozen=True)
class BatchPlan:
    """What a batch does, decided before any write: per-item results and each job's final state.

    ``deletes`` are (job_id, version) of stored rows a tombstone removes; they run before
    ``upserts`` so that a job deleted and defined again in the same batch is re-created.
    ``refusals`` are the items a quota refused; ``adds`` counts, per tenant with a quota, the
    items that would bring a job into it, refused ones included (what the batch asked for).
    """

    writes: tuple[JobWrite, ...]
    deletes: tuple[tuple[str, int], ...]
    upserts: tuple[tuple[JobDefinition, int], ...]  # (definition, resolved version)
    refusals: tuple[QuotaRefusal, ...] = ()
    adds: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _JobState:
    """One job while a batch is resolved: does it exist, at which version and in which tenant,
    what to write."""

    exists: bool
    version: int
    in_store: bool  # the stored row is still there (no tombstone of this batch removed it yet)
    tenant: str | None  # while it exists
    deleted_stored: int | None = None  # version of the tombstone that removes the stored row
    final: tuple[JobDefinition, int] | None = None


def resolve_batch(
    items: Sequence[JobDefinition | JobTombstone],
    stored: Mapping[str, StoredJob],
    quotas: Mapping[str, TenantQuota] | None = None,
) -> BatchPlan:
    """Apply ``items`` in order to the stored jobs, in memory (pure, no I/O).

    Args:
        items: Definitions and tombstones, possibly several per job_id.
        stored: The stored version and tenant of each job that exists.
        quotas: The tenants with a ``max_jobs`` and their jobs before the batch; an item that
            would bring a job into one of them when it is full is refused (``over_quota``).
    """
    quotas = quotas or {}
    jobs = {tenant: quota.jobs for tenant, quota in quotas.items()}
    adds: Counter[str] = Counter()
    refusals: list[QuotaRefusal] = []
    states: dict[str, _JobState] = {}
    writes: list[JobWrite] = []
    for index, item in enumerate(items):
        state = states.get(item.job_id)
        if state is None:
            row = stored.get(item.job_id)
            state = states[item.job_id] = (
                _JobState(True, row.version, True, row.tenant)
                if row is not None
                else _JobState(False, 0, False, None)
            )
        if isinstance(item, JobTombstone):
            if not state.exists:
                action = "not_found"
            elif item.version > state.version:
                action = "deleted"
                if state.tenant in jobs:
                    jobs[state.tenant] -= 1
                if state.in_store:
                    state.deleted_stored, state.in_store = item.version, False
                state.exists, state.version, state.tenant, state.final = False, 0, None, None
            else:
                action = "unchanged"
            writes.append(JobWrite(item.job_id, action, item.version))
            continue
        # Version 0 = "the version before it + 1", resolved without copying the definition.
        version = item.version or state.version + 1
        if not state.exists:
            action = "created"
        elif version > state.version:
            action = "updated"
        else:
            action = "unchanged"
        if action != "unchanged" and item.tenant != state.tenant:
            # The job enters item.tenant (new, or moved from another tenant).
            quota = quotas.get(item.tenant)
            if quota is not None:
                adds[item.tenant] += 1
                if jobs[item.tenant] >= quota.max_jobs:
                    refusal = QuotaRefusal(index, item.tenant, quota.max_jobs, jobs[item.tenant])
                    refusals.append(refusal)
                    writes.append(JobWrite(item.job_id, "over_quota", version, refusal.reason))
                    continue
                jobs[item.tenant] += 1
            if state.tenant in jobs:
                jobs[state.tenant] -= 1
        if action != "unchanged":
            state.exists, state.version, state.final = True, version, (item, version)
            state.tenant = item.tenant
        writes.append(JobWrite(item.job_id, action, version))
    deletes = tuple(
        (job_id, s.deleted_stored) for job_id, s in states.items() if s.deleted_stored is not None
    )
    upserts = tuple(s.final for s in states.values() if s.final is not None)
    return BatchPlan(tuple(writes), deletes, upserts, tuple(refusals), dict(adds))


def _chunks(values: Sequence[_T]) -> Iterator[Sequence[_T]]:
    for start in range(0, len(values), CHUNK_SIZE):
        yield values[start : start + CHUNK_SIZE]


_ANALYZE_MIN_ROWS = 1000


def jobs_apply(
    tx: Tx,
    items: Sequence[JobDefinition | JobTombstone],
    cache: ScheduleCache | None = None,
    *,
    partial: bool = False,
) -> list[JobWrite]:
    """Store every item inside ``tx``; the caller's transaction makes the batch all-or-nothing.

    Returns one result per item, in order. A write that a concurrent writer overtook between
    the version lookup and the write (its version became stale) is reported ``unchanged``.

    An item a tenant quota refuses raises ``QuotaExceeded`` before anything is written (job
    files: the whole file or nothing); with ``partial`` (the jobs topic) it is reported
    ``over_quota`` with the reason and the other items are written.
    """
    cache = cache or ScheduleCache()
    now = tx.db_now()
    # Lock and count first, read the stored jobs after: a job a concurrent writer moves out of a
    # locked tenant in between is then seen where it went (counted once more, never less).
    quotas = quotas_lock(tx.conn, {i.tenant for i in items if isinstance(i, JobDefinition)})
    stored: dict[str, StoredJob] = {}
    for chunk in _chunks(list(dict.fromkeys(item.job_id for item in items))):
        stored.update(tx.jobs_get_versions(chunk))
    plan = resolve_batch(items, stored, quotas)
    if plan.refusals and not partial:
        raise _over_quota(plan, quotas)
    removed, written = _write_plan(tx, plan.deletes, plan.upserts, cache, now)
    return _reconcile(plan, removed, written)


def jobs_apply_clusters(
    clusters: ClusterStores,
    items: Sequence[JobDefinition | JobTombstone],
    cache: ScheduleCache | None = None,
    *,
    partial: bool = False,
) -> list[JobWrite]:
    """``jobs_apply`` over the clusters of a shard map: each job is written to its shard's cluster.

    With one cluster this is ``jobs_apply`` in one transaction. With several, the batch is resolved
    as a whole (results in item order, as ``jobs_apply`` gives them) and written as one
    transaction per cluster. Tenant quotas stay exact: the quota rows are locked in the home
    cluster for the whole write, so writers adding to one tenant take turns, and each tenant's
    jobs are counted on every cluster after the lock was granted.

    A batch spanning clusters is not atomic across them: when one cluster's transaction fails,
    the parts already committed on others stay (the error is raised). Applying the same batch
    again is harmless: versions decide, and what is already stored comes back ``unchanged``.
    """
    cache = cache or ScheduleCache()
    if len(clusters) == 1:
        with clusters.home.tx() as tx:
            return jobs_apply(tx, items, cache, partial=partial)
    shard_map = clusters.shard_map
    tenants = {i.tenant for i in items if isinstance(i, JobDefinition)}
    with clusters.home.tx() as home:
        limits = quota_limits_lock(home.conn, tenants)
        counts: Counter[str] = Counter()
        stored: dict[str, StoredJob] = {}
        job_ids = list(dict.fromkeys(item.job_id for item in items))
        ids_of = dict(clusters.split(job_ids, str))
        for store in clusters:  # every cluster: a tenant's jobs may be on any of them
            with store.tx() as tx:
                counts.update(jobs_per_tenant(tx.conn, limits))
                for chunk in _chunks(ids_of.get(store, [])):
                    stored.update(tx.jobs_get_versions(chunk))
        quotas = {t: TenantQuota(limit, counts[t]) for t, limit in limits.items()}
        plan = resolve_batch(items, stored, quotas)
        if plan.refusals and not partial:
            raise _over_quota(plan, quotas)
        deletes = shard_map.split(plan.deletes, lambda d: d[0])
        upserts = shard_map.split(plan.upserts, lambda u: u[0].job_id)
        removed: set[str] = set()
        written: set[str] = set()
        for index in sorted(set(deletes) | set(upserts)):
            with clusters.stores[index].tx() as tx:
                gone, put = _write_plan(
                    tx, deletes.get(index, []), upserts.get(index, []), cache, tx.db_now()
                )
            removed |= gone
            written |= put
    return _reconcile(plan, removed, written)


def _over_quota(plan: BatchPlan, quotas: Mapping[str, TenantQuota]) -> QuotaExceeded:
    """The error for a job file the quota refuses: its first refused item."""
    first = plan.refusals[0]
    return QuotaExceeded(
        f"jobs[{first.index}].tenant",
        tenant=first.tenant,
        max_jobs=first.max_jobs,
        jobs=quotas[first.tenant].jobs,
        adds=plan.adds[first.tenant],
    )


def _write_plan(
    tx: Tx,
    deletes: Sequence[tuple[str, int]],
    upserts: Sequence[tuple[JobDefinition, int]],
    cache: ScheduleCache,
    now: datetime,
) -> tuple[set[str], set[str]]:
    """Delete and upsert what a resolved plan says, inside ``tx``; (removed, written) job ids."""
    removed: set[str] = set()
    for chunk in _chunks(deletes):
        removed |= tx.jobs_delete_many(chunk)
    # next_run_at once per distinct schedule (a file of 100k midnight jobs has a few specs),
    # kept rendered as the ISO text the statement's JSON carries.
    next_runs: dict[ScheduleSpec, str | None] = {}
    written: set[str] = set()
    # The database applies one chunk while Python builds and encodes the next (one statement in
    # flight, the connection used by one thread at a time): on two cores this hides most
    # statement time. The thread only waits on the database, so it never holds the GIL for long.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobs-apply") as writer:
        pending: Future[set[str]] | None = None
        for part in _chunks(upserts):
            records = []
            for job, version in part:
                spec = job.schedule
                if spec not in next_runs:
                    next_runs[spec] = iso_or_none(initial_next_run_at(cache.get(spec), now))
                record = job_record(job, version, None)
                record["next_run_at"] = next_runs[spec]
                records.append(record)
            batch = batch_json_shared(records)
            if pending is not None:
                written |= pending.result()
            pending = writer.submit(tx.jobs_upsert_encoded, batch)
        if pending is not None:
            written |= pending.result()
    refresh_statistics(tx, len(written) + len(removed))
    return removed, written


def refresh_statistics(tx: Tx, changed: int) -> bool:
    """ANALYZE ``jobs`` when a write changed a large share of it; True if it did.

    PostgreSQL plans the planner's due scan from the statistics it last gathered. After 100k
    jobs land in a table the statistics call nearly empty, the scan runs as a linear search
    (20 s per batch instead of 0.6 s) until autovacuum analyzes the table, up to a minute later:
    a midnight applied shortly before midnight would be planned late. So a write of at least
    ``_ANALYZE_MIN_ROWS`` rows and a tenth of what the statistics believe is followed by an
    ANALYZE in the same transaction (a few hundred ms for 100k rows).
    """
    if changed < _ANALYZE_MIN_ROWS or changed < 0.1 * tx.jobs_estimated_rows():
        return False
    tx.jobs_analyze()
    return True


def _reconcile(plan: BatchPlan, removed: set[str], written: set[str]) -> list[JobWrite]:
    """Results as resolved, except where the database refused a write (a concurrent writer)."""
    refused = {job_id for job_id, _v in plan.deletes if job_id not in removed}
    refused |= {job.job_id for job, _v in plan.upserts if job.job_id not in written}
    if not refused:
        return list(plan.writes)
    return [
        replace(w, action="unchanged")
        if w.job_id in refused and w.action in ("created", "updated", "deleted")
        else w
        for w in plan.writes
    ]


def jobs_set_paused(tx: Tx, job_id: str, paused: bool, cache: ScheduleCache | None = None) -> str:
    """Pause or resume one job; returns ``paused``, ``resumed`` or ``unchanged``.

    Raises ``NotFound`` if there is no such job. Resuming starts again at the next occurrence after
    now: occurrences that fell into the pause are not caught up.
    """
    row = tx.jobs_get_schedule(job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}")
    if paused:
        return "paused" if tx.jobs_pause(job_id) is not None else "unchanged"
    if not row.paused:
        return "unchanged"
    spec = spec_from_row(row)
    # Same rule as a newly applied job: the next occurrence after now (a passed `at` runs once;
    # if it already ran, the unique (job_id, scheduled_for) absorbs the repeat).
    next_run_at = initial_next_run_at((cache or ScheduleCache()).get(spec), tx.db_now())
    tx.jobs_resume(job_id, next_run_at)
    return "resumed"
