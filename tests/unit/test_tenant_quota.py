"""Tenant quotas decided in memory (``resolve_batch``): item by item in batch order, adds only."""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.store.jobs import BatchPlan, resolve_batch
from duetime.store.store import StoredJob
from duetime.store.tenants import TenantQuota


@cache  # definitions are frozen; the property below builds thousands of the same few
def _job(job_id: str, tenant: str = "acme", version: int | None = None) -> JobDefinition:
    data: dict[str, Any] = {
        "id": job_id,
        "tenant": tenant,
        "schedule": {"cron": "0 0 * * *"},
        "target": {"http": {"url": "https://example.com/hook"}},
    }
    if version is not None:
        data["version"] = version
    return parse_job(data)


def _actions(plan: BatchPlan) -> list[tuple[str, str]]:
    return [(w.job_id, w.action) for w in plan.writes]


def _upserted(plan: BatchPlan) -> dict[str, str]:
    return {job.job_id: job.tenant for job, _version in plan.upserts}


def test_creates_past_the_quota_are_refused_in_batch_order() -> None:
    plan = resolve_batch(
        [_job("a1"), _job("b1", "globex"), _job("a2"), _job("a3"), _job("b2", "globex")],
        {},
        {"acme": TenantQuota(max_jobs=3, jobs=1)},
    )
    # acme has room for two more: the first two fit, the third is refused; globex has no quota.
    assert _actions(plan) == [
        ("a1", "created"),
        ("b1", "created"),
        ("a2", "created"),
        ("a3", "over_quota"),
        ("b2", "created"),
    ]
    assert _upserted(plan) == {"a1": "acme", "b1": "globex", "a2": "acme", "b2": "globex"}
    [refusal] = plan.refusals
    assert (refusal.index, refusal.tenant, refusal.max_jobs, refusal.jobs) == (3, "acme", 3, 3)
    assert plan.writes[3].reason == "tenant acme may have at most 3 jobs and has 3"
    assert plan.writes[3].version == 1
    assert plan.adds == {"acme": 3}  # what the batch asked for, the refused one included


def test_updates_of_a_tenant_above_a_lowered_quota_pass_and_stale_items_count_nothing() -> None:
    stored = {f"j{i}": StoredJob(1, "acme") for i in range(5)}
    plan = resolve_batch(
        [_job("j0"), _job("j1", version=1), _job("new")],
        stored,
        {"acme": TenantQuota(max_jobs=2, jobs=5)},
    )
    assert _actions(plan) == [("j0", "updated"), ("j1", "unchanged"), ("new", "over_quota")]
    assert plan.writes[2].reason == "tenant acme may have at most 2 jobs and has 5"
    assert _upserted(plan) == {"j0": "acme"}


def test_deletes_always_pass_and_free_room_for_the_items_after_them() -> None:
    stored = {"old1": StoredJob(1, "acme"), "old2": StoredJob(1, "acme")}
    plan = resolve_batch(
        [_job("early"), JobTombstone("old1", 2), _job("late"), JobTombstone("old2", 2)],
        stored,
        {"acme": TenantQuota(max_jobs=2, jobs=2)},
    )
    # In batch order: "early" finds acme full; after the first delete "late" fits.
    assert _actions(plan) == [
        ("early", "over_quota"),
        ("old1", "deleted"),
        ("late", "created"),
        ("old2", "deleted"),
    ]
    assert plan.deletes == (("old1", 2), ("old2", 2))
    assert _upserted(plan) == {"late": "acme"}


def test_a_move_counts_for_the_new_tenant_and_frees_room_in_the_old_one() -> None:
    stored = {"m1": StoredJob(3, "globex"), "m2": StoredJob(1, "acme")}
    quotas = {"acme": TenantQuota(max_jobs=1, jobs=1), "globex": TenantQuota(max_jobs=1, jobs=1)}
    plan = resolve_batch(
        [_job("m1", "acme"), _job("m2", "globex"), _job("m1", "acme")], stored, quotas
    )
    # m1 cannot enter the full acme and stays in globex (nothing written for it); m2 cannot
    # enter globex while m1 is still there; the retry of m1 finds acme as full as before.
    assert _actions(plan) == [("m1", "over_quota"), ("m2", "over_quota"), ("m1", "over_quota")]
    assert plan.upserts == ()
    # Moved the other way round, a move out makes room for a move in.
    plan = resolve_batch([_job("m2", "globex"), _job("m1", "acme")], stored, quotas)
    assert _actions(plan) == [("m2", "over_quota"), ("m1", "over_quota")]
    quotas["globex"] = TenantQuota(max_jobs=2, jobs=1)
    plan = resolve_batch([_job("m2", "globex"), _job("m1", "acme")], stored, quotas)
    assert _actions(plan) == [("m2", "updated"), ("m1", "updated")]
    assert _upserted(plan) == {"m2": "globex", "m1": "acme"}


def test_several_items_of_one_job_count_once_and_a_refused_create_leaves_no_trace() -> None:
    quotas = {"acme": TenantQuota(max_jobs=1, jobs=0)}
    plan = resolve_batch([_job("x"), _job("x"), _job("x", version=7), _job("y")], {}, quotas)
    # x enters once, its later versions are updates; y finds acme full.
    assert _actions(plan) == [
        ("x", "created"),
        ("x", "updated"),
        ("x", "updated"),
        ("y", "over_quota"),
    ]
    assert plan.adds == {"acme": 2}
    # A refused create does not exist for the items after it: y's next item is a create again
    # (version 0 resolves to 1, not 2), refused again; after x's delete it fits.
    plan = resolve_batch(
        [_job("x"), _job("y"), _job("y"), JobTombstone("x", 5), _job("y")], {}, quotas
    )
    assert [(w.job_id, w.action, w.version) for w in plan.writes] == [
        ("x", "created", 1),
        ("y", "over_quota", 1),
        ("y", "over_quota", 1),
        ("x", "deleted", 5),
        ("y", "created", 1),
    ]
    assert _upserted(plan) == {"y": "acme"} and plan.deletes == ()


def test_without_quotas_nothing_is_refused() -> None:
    stored = {"s": StoredJob(1, "acme")}
    items: list[JobDefinition | JobTombstone] = [_job("a"), _job("s", "globex"), _job("b")]
    plan = resolve_batch(items, stored, {})
    assert plan.refusals == () and plan.adds == {}
    assert plan == resolve_batch(items, stored)


_TENANTS = ("acme", "globex", "initech")


@st.composite
def _batches(
    draw: st.DrawFn,
) -> tuple[dict[str, StoredJob], dict[str, TenantQuota], list[JobDefinition | JobTombstone]]:
    ids = [f"j{i}" for i in range(6)]
    stored = {
        job_id: StoredJob(draw(st.integers(1, 3)), draw(st.sampled_from(_TENANTS)))
        for job_id in ids
        if draw(st.booleans())
    }
    counts = Counter(s.tenant for s in stored.values())
    quotas = {
        tenant: TenantQuota(draw(st.integers(1, 4)), counts[tenant])
        for tenant in _TENANTS
        if draw(st.booleans())
    }
    items: list[JobDefinition | JobTombstone] = []
    for _ in range(draw(st.integers(0, 12))):
        job_id, version = draw(st.sampled_from(ids)), draw(st.integers(0, 5))
        if draw(st.integers(0, 3)) == 0:
            items.append(JobTombstone(job_id, version or 1))
        else:  # version 0: none given ("the version before it + 1")
            items.append(_job(job_id, draw(st.sampled_from(_TENANTS)), version or None))
    return stored, quotas, items


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_a_batch_never_takes_a_tenant_above_its_quota_or_what_it_had(
    batch: tuple[dict[str, StoredJob], dict[str, TenantQuota], list[JobDefinition | JobTombstone]],
) -> None:
    stored, quotas, items = batch
    plan = resolve_batch(items, stored, quotas)
    # The jobs after the batch, as the writes leave them: deletes first, then upserts.
    after = {job_id: s.tenant for job_id, s in stored.items()}
    for job_id, _version in plan.deletes:
        del after[job_id]
    after.update({job.job_id: job.tenant for job, _version in plan.upserts})
    counts = Counter(after.values())
    for tenant, quota in quotas.items():
        assert counts[tenant] <= max(quota.max_jobs, quota.jobs)
    # Refusals only where a quota is, and only ever of definitions.
    for refusal in plan.refusals:
        assert refusal.tenant in quotas and refusal.jobs >= refusal.max_jobs
        assert isinstance(items[refusal.index], JobDefinition)
    assert [w.action for w in plan.writes].count("over_quota") == len(plan.refusals)
