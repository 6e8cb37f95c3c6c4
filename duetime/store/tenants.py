"""Tenants in PostgreSQL (sql/tenants.sql): fairness weights, job quotas and their counting.

A tenant without a row weighs 1 and has no quota. ``quotas_lock`` is the locked half of the
quota rule that ``jobs.jobs_apply`` enforces: it locks the rows of the tenants a write may add
jobs to (those with a ``max_jobs``), then counts their jobs, so writers adding to one tenant
take turns and each counts what the one before it committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from .queries import query

__all__ = [
    "TenantOverview",
    "TenantQuota",
    "jobs_per_tenant",
    "overview",
    "quota_limits_lock",
    "quotas_lock",
    "set_tenant",
]


@dataclass(frozen=True)
class TenantQuota:
    """A tenant's ``max_jobs`` and the jobs it has when a write starts (counted under its lock)."""

    max_jobs: int
    jobs: int


@dataclass(frozen=True)
class TenantOverview:
    tenant: str
    weight: int
    max_jobs: int | None
    jobs: int


def quotas_lock(conn: Connection, tenants: Iterable[str]) -> dict[str, TenantQuota]:
    """Lock the rows of ``tenants`` that have a quota until the transaction ends; their quotas.

    Two statements on purpose: a count in the locking statement would read the snapshot taken
    before the lock was granted and miss the jobs its previous holder committed.
    """
    limits = quota_limits_lock(conn, tenants)
    if not limits:
        return {}
    counts = jobs_per_tenant(conn, limits)
    return {t: TenantQuota(limit, counts.get(t, 0)) for t, limit in limits.items()}


def quota_limits_lock(conn: Connection, tenants: Iterable[str]) -> dict[str, int]:
    """Lock the rows of ``tenants`` that have a quota (home cluster); their ``max_jobs``."""
    names = sorted(set(tenants))
    if not names:
        return {}
    return {
        r.tenant: int(r.max_jobs)
        for r in conn.execute(query("tenants_lock_quotas"), {"tenants": names})
    }


def jobs_per_tenant(conn: Connection, tenants: Iterable[str]) -> dict[str, int]:
    """How many jobs each of ``tenants`` has in this database (one cluster's share)."""
    names = sorted(set(tenants))
    if not names:
        return {}
    return {
        r.tenant: int(r.jobs)
        for r in conn.execute(query("jobs_count_by_tenant"), {"tenants": names})
    }


def set_tenant(
    conn: Connection,
    tenant: str,
    *,
    weight: int | None = None,
    max_jobs: int | None = None,
    remove_max_jobs: bool = False,
) -> TenantOverview:
    """Create or change a tenant: what is given changes, the rest is kept (a new row weighs 1)."""
    if remove_max_jobs and max_jobs is not None:
        raise ValueError("max_jobs given and removed at once")
    row = conn.execute(
        query("tenants_set"),
        {
            "tenant": tenant,
            "weight": weight,
            "max_jobs": max_jobs,
            "set_max_jobs": remove_max_jobs or max_jobs is not None,
        },
    ).one()
    return _overview(row)


def overview(conn: Connection) -> list[TenantOverview]:
    """Every tenant with a row or with jobs, by name."""
    return [_overview(r) for r in conn.execute(query("tenants_overview")).all()]


def _overview(row: Any) -> TenantOverview:
    return TenantOverview(
        tenant=row.tenant,
        weight=int(row.fairness_weight),
        max_jobs=None if row.max_jobs is None else int(row.max_jobs),
        jobs=int(row.jobs),
    )
