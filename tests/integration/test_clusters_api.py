"""The REST API and the dashboard on two PostgreSQL clusters: each job written to and read from
its shard's cluster, lists merged with cursors that return every row once, a run on the second
cluster found by its id alone (detail, retry, async-target callbacks), the stats added up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from duetime.model import run_id_for
from duetime.sharding import shard_for
from duetime.store import AttemptEnd, ClaimRequest, NewRun, Store
from duetime.store import tenants as tenant_store

from .api_client import Api, http_job, open_api

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)


def ids_on(cluster: int, count: int, prefix: str = "job") -> list[str]:
    """``count`` job ids whose shard is in ``cluster`` (0: shards 0-63, 1: 64-127)."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"{prefix}-{n:03d}"
        if shard_for(job_id) // 64 == cluster:
            found.append(job_id)
        n += 1
    return found


@pytest.fixture
def api(cluster_urls: tuple[str, str]) -> Iterator[Api]:
    with open_api(cluster_urls) as handle:
        yield handle


def _job_ids(store: Store) -> set[str]:
    with store.tx() as tx:
        return {r.job_id for r in tx.conn.exec_driver_sql("SELECT job_id FROM jobs")}


def _every_page(api: Api, path: str, headers: dict[str, str], **params: Any) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        page = api.client.get(path, params=query, headers=headers)
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return items


def test_jobs_are_written_to_their_cluster_and_pages_return_each_once(api: Api) -> None:
    acme = api.token("acme")
    first, second = ids_on(0, 4), ids_on(1, 5)
    for job_id in [*second, *first]:
        created = api.client.post("/v1/jobs", json=http_job(job_id), headers=acme)
        assert created.status_code == 201, created.text
    home, other = api.clusters.stores
    assert _job_ids(home) == set(first) and _job_ids(other) == set(second)

    listed = _every_page(api, "/v1/jobs", acme, limit=2)
    assert [j["id"] for j in listed] == sorted(first + second)
    # Reads and writes by id go to the job's cluster.
    job_id = second[0]
    assert api.client.get(f"/v1/jobs/{job_id}", headers=acme).json()["id"] == job_id
    changed = http_job(job_id, schedule={"cron": "5 4 * * *"})
    replaced = api.client.put(f"/v1/jobs/{job_id}", json=changed, headers=acme)
    assert replaced.status_code == 200 and replaced.json()["version"] == 2
    again = api.client.post("/v1/jobs", json=http_job(job_id), headers=acme)
    assert again.status_code == 409
    paused = api.client.post(f"/v1/jobs/{job_id}/pause", headers=acme)
    assert paused.json()["outcome"] == "paused"
    active = _every_page(api, "/v1/jobs", acme, limit=3, state="active")
    assert job_id not in [j["id"] for j in active] and len(active) == 8
    assert api.client.delete(f"/v1/jobs/{job_id}", headers=acme).status_code == 204
    assert job_id not in _job_ids(other)


def test_a_tenants_quota_counts_its_jobs_on_every_cluster(api: Api) -> None:
    acme = api.token("acme")
    with api.store.tx() as tx:
        tenant_store.set_tenant(tx.conn, "acme", max_jobs=2)
    for job_id in (ids_on(0, 1)[0], ids_on(1, 1)[0]):
        assert api.client.post("/v1/jobs", json=http_job(job_id), headers=acme).status_code == 201
    over = api.client.post("/v1/jobs", json=http_job(ids_on(1, 2)[1]), headers=acme)
    assert over.status_code == 409 and over.json()["field"] == "job.tenant"


def _add_runs(store: Store, job_id: str, times: list[datetime]) -> list[uuid.UUID]:
    with store.tx() as tx:
        for day in {t.date() for t in times}:
            tx.runs_ensure_partition(day)
        tx.runs_insert(
            [NewRun(run_id_for(job_id, t), job_id, "acme", "svc", t, t, 1) for t in times]
        )
    return [run_id_for(job_id, t) for t in times]


def test_runs_pages_merge_both_clusters_newest_first(api: Api) -> None:
    acme = api.token("acme")
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    times = [base + timedelta(minutes=n) for n in range(4)]
    a, b = ids_on(0, 1)[0], ids_on(1, 1)[0]
    home, other = api.clusters.stores
    runs = _add_runs(home, a, times) + _add_runs(other, b, times)
    listed = _every_page(api, "/v1/runs", acme, limit=3)
    assert sorted(r["run_id"] for r in listed) == sorted(str(r) for r in runs)
    keys = [(r["scheduled_for"], uuid.UUID(r["run_id"])) for r in listed]
    assert keys == sorted(keys, reverse=True)
    one_job = _every_page(api, "/v1/runs", acme, limit=3, job_id=b)
    assert [r["job_id"] for r in one_job] == [b] * 4
    # Runs due and not handed to the broker, on both clusters, counted once each.
    outbox = api.client.get("/v1/stats/outbox", headers=acme).json()
    assert outbox["runs"] == 8
    assert datetime.fromisoformat(outbox["oldest_due_at"]) == times[0]


def _hand_over(store: Store, run_id: uuid.UUID, scheduled_for: datetime) -> uuid.UUID:
    """What a worker does for a target's 202: claim attempt 1 and hand it over."""
    request = ClaimRequest(run_id, scheduled_for, 1, uuid.uuid4(), LEASE)
    claim = store.runs_claim_batch("w1", [request])[request.lease_token]
    handed = AttemptEnd(
        run_id,
        scheduled_for,
        1,
        claim.lease_token,
        "running",
        "accepted",
        status_code=202,
        lease=LEASE,
    )
    assert store.runs_complete_batch("w1", [handed]) == {claim.lease_token}
    return claim.lease_token


def test_a_run_on_the_second_cluster_by_its_id_callbacks_detail_and_retry(api: Api) -> None:
    acme = api.token("acme")
    job_id = ids_on(1, 1)[0]
    body = http_job(job_id, retry={"max_attempts": 1})
    assert api.client.post("/v1/jobs", json=body, headers=acme).status_code == 201
    other = api.clusters.stores[1]
    scheduled_for = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    [run_id] = _add_runs(other, job_id, [scheduled_for])
    token = _hand_over(other, run_id, scheduled_for)

    path = f"/v1/runs/{run_id}/attempts/1"
    headers = {"X-Duetime-Callback-Token": str(token)}
    beat = api.client.post(f"{path}/heartbeat", json={"progress": "half"}, headers=headers)
    assert beat.status_code == 200 and beat.json()["state"] == "running", beat.text
    wrong = {"X-Duetime-Callback-Token": str(uuid.uuid4())}
    assert api.client.post(f"{path}/heartbeat", json={}, headers=wrong).status_code == 404
    failed = {"outcome": "failed", "error": "boom", "retryable": False}
    done = api.client.post(f"{path}/complete", json=failed, headers=headers)
    assert done.status_code == 200 and done.json()["state"] == "dead", done.text

    detail = api.client.get(f"/v1/runs/{run_id}", headers=acme)
    assert detail.status_code == 200 and detail.json()["state"] == "dead"
    assert [a["status"] for a in detail.json()["attempts"]] == ["failed"]
    retried = api.client.post(f"/v1/runs/{run_id}/retry", headers=acme)
    assert retried.status_code == 200 and retried.json()["state"] == "scheduled", retried.text
    assert api.client.get(f"/v1/runs/{uuid.uuid4()}", headers=acme).status_code == 404
    # Another tenant finds it on no cluster.
    assert api.client.get(f"/v1/runs/{run_id}", headers=api.token("other")).status_code == 404

    triggered = api.client.post(f"/v1/jobs/{job_id}/trigger", headers=acme)
    assert triggered.status_code == 201
    with other.tx() as tx:
        found = tx.conn.exec_driver_sql(
            "SELECT count(*) FROM runs WHERE run_id = %(r)s", {"r": triggered.json()["run_id"]}
        ).scalar_one()
    assert found == 1


def test_dashboard_lists_both_clusters_and_shows_a_second_cluster_run(api: Api) -> None:
    token = api.token(None)["Authorization"].removeprefix("Bearer ")
    acme = api.token("acme")
    a, b = ids_on(0, 1)[0], ids_on(1, 1)[0]
    for job_id in (a, b):
        assert api.client.post("/v1/jobs", json=http_job(job_id), headers=acme).status_code == 201
    scheduled_for = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    [run_id] = _add_runs(api.clusters.stores[1], b, [scheduled_for])
    signed_in = api.client.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert signed_in.status_code == 303
    jobs = api.client.get("/ui/jobs")
    assert jobs.status_code == 200 and a in jobs.text and b in jobs.text
    job = api.client.get(f"/ui/jobs/{b}")
    assert job.status_code == 200 and str(run_id) in job.text
    run = api.client.get(f"/ui/runs/{run_id}")
    assert run.status_code == 200 and b in run.text
    overview = api.client.get("/ui/")
    assert overview.status_code == 200
