"""Writing job definitions: one transaction for a whole batch, versions resolved, next run computed.

Used by ``duetime jobs apply`` and by the planner's ingest of the jobs topic, so both follow the
same rules: a definition replaces the stored one only if its version is newer; a definition
without a version (0) becomes "stored version + 1"; next_run_at is recomputed only when the
schedule changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from duetime.errors import NotFound
from duetime.events import JobTombstone
from duetime.model import JobDefinition
from duetime.planning import initial_next_run_at
from duetime.schedule import ScheduleCache

from .rows import spec_from_row
from .store import Tx

__all__ = ["JobWrite", "jobs_apply", "jobs_set_paused"]


@dataclass(frozen=True)
class JobWrite:
    job_id: str
    action: str  # created | updated | unchanged (stale version) | deleted | not_found
    version: int


def jobs_apply(
    tx: Tx,
    items: Sequence[JobDefinition | JobTombstone],
    cache: ScheduleCache | None = None,
) -> list[JobWrite]:
    """Store every item inside ``tx``; the caller's transaction makes the batch all-or-nothing."""
    cache = cache or ScheduleCache()
    now = tx.db_now()
    results: list[JobWrite] = []
    for item in items:
        stored = tx.jobs_get_version(item.job_id)
        if isinstance(item, JobTombstone):
            deleted = tx.jobs_delete(item.job_id, item.version)
            action = "deleted" if deleted else ("not_found" if stored is None else "unchanged")
            results.append(JobWrite(item.job_id, action, item.version))
            continue
        job = item
        if job.version == 0:
            job = replace(job, version=(stored or 0) + 1)
        next_run_at = initial_next_run_at(cache.get(job.schedule), now)
        written = tx.jobs_upsert(job, next_run_at)
        action = "unchanged" if not written else "created" if stored is None else "updated"
        results.append(JobWrite(job.job_id, action, job.version))
    return results


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
