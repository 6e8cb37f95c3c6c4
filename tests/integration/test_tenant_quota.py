"""Tenant quotas under concurrent writers, on PostgreSQL: writers adding to one tenant take turns
(its row locked until each commits), so together they never take it above ``max_jobs``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from duetime.errors import QuotaExceeded
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.store import Store, tenants
from duetime.store.jobs import JobWrite, jobs_apply

pytestmark = pytest.mark.integration


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url, pool_size=4, application_name="quota-test")
    with store.tx() as tx:
        tenants.set_tenant(tx.conn, "acme", max_jobs=4)
        tenants.set_tenant(tx.conn, "globex", max_jobs=4)
    yield store
    store.close()


def _jobs(tenant: str, *ids: str) -> list[JobDefinition]:
    return [
        parse_job(
            {
                "id": job_id,
                "tenant": tenant,
                "schedule": {"cron": "0 0 * * *"},
                "target": {"http": {"url": "https://example.com/hook"}},
            }
        )
        for job_id in ids
    ]


def _count(store: Store, tenant: str) -> int:
    with store.engine.begin() as conn:
        query = text("SELECT count(*) FROM jobs WHERE tenant = :t")
        return int(conn.execute(query, {"t": tenant}).scalar_one())


def _wait_for_lock_waiter(store: Store) -> None:
    """Until a backend of this test waits for a lock (the second writer, on acme's row)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with store.engine.begin() as conn:
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = 'quota-test' AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("the second writer never waited for the first")


@pytest.mark.parametrize("partial", [True, False], ids=["jobs-topic", "job-file"])
def test_a_second_writer_waits_for_the_first_and_counts_its_jobs(
    store: Store, partial: bool
) -> None:
    second: list[JobWrite] = []
    failure: list[BaseException] = []

    def write_second() -> None:
        try:
            with store.tx() as tx:
                second.extend(jobs_apply(tx, _jobs("acme", "b1", "b2", "b3"), partial=partial))
        except QuotaExceeded as exc:
            failure.append(exc)

    with store.tx() as first:
        assert [w.action for w in jobs_apply(first, _jobs("acme", "a1", "a2", "a3"))] == [
            "created"
        ] * 3
        thread = threading.Thread(target=write_second)
        thread.start()
        _wait_for_lock_waiter(store)
        # A writer to another tenant is not held up by acme's lock.
        with store.tx() as other:
            assert [w.action for w in jobs_apply(other, _jobs("globex", "g1"))] == ["created"]
        assert thread.is_alive()
    thread.join(10)
    assert not thread.is_alive()
    if partial:
        assert [w.action for w in second] == ["created", "over_quota", "over_quota"]
        assert second[1].reason == "tenant acme may have at most 4 jobs and has 4"
        assert _count(store, "acme") == 4
    else:
        [exc] = failure
        assert str(exc) == (
            "jobs[1].tenant: tenant acme may have at most 4 jobs; it has 3 and this batch adds 3"
        )
        assert _count(store, "acme") == 3


def test_racing_writers_never_exceed_the_quota(store: Store) -> None:
    start = threading.Barrier(4)

    def write(n: int) -> list[str]:
        start.wait()
        with store.tx() as tx:
            writes = jobs_apply(tx, _jobs("acme", f"r{n}-1", f"r{n}-2", f"r{n}-3"), partial=True)
        return [w.action for w in writes]

    with ThreadPoolExecutor(4) as pool:
        actions = [a for result in pool.map(write, range(4)) for a in result]
    assert actions.count("created") == 4 and actions.count("over_quota") == 8
    assert _count(store, "acme") == 4
