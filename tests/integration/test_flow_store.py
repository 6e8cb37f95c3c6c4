"""Per-target grants on real PostgreSQL: rate buckets, in-flight slots that heal, the default
limits, and one limit shared by concurrent dispatchers."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from duetime.flow import TargetLimit
from duetime.store import Store, flow
from duetime.store.attempts import ClaimRequest
from duetime.store.flow import Candidate, GrantRequest

pytestmark = pytest.mark.integration


@pytest.fixture
def store(database_url: str) -> Store:
    store = Store(database_url, pool_size=4)
    with store.tx() as tx:
        today = datetime.now(UTC).date()  # and yesterday: runs minutes ago may fall on it
        tx.runs_ensure_partition(today - timedelta(days=1))
        tx.runs_ensure_partition(today)
    yield store  # type: ignore[misc]
    store.close()


def _runs(store: Store, target: str, count: int) -> list[uuid.UUID]:
    """Scheduled runs (attempt 0) of ``target``, due now."""
    ids = [uuid.uuid4() for _ in range(count)]
    with store.tx() as tx:
        for run_id in ids:
            tx.conn.execute(
                text(
                    "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, "
                    "due_at, max_attempts) VALUES (:id, :job, 'team', :target, now(), now(), 3)"
                ),
                {"id": run_id, "job": f"job-{run_id.hex[:8]}", "target": target},
            )
    return ids


def _ask(store: Store, target: str, count: int, ids: list[uuid.UUID] | None = None) -> int:
    candidates = [Candidate(run_id, 1) for run_id in ids or [uuid.uuid4() for _ in range(count)]]
    return store.targets_grant([GrantRequest(target, candidates[:count])]).get(target, 0)


def _set(store: Store, name: str, **limits: float | int) -> TargetLimit:
    with store.tx() as tx:
        return flow.set_limits(tx.conn, name, **limits)  # type: ignore[arg-type]


def test_a_target_without_limits_is_granted_everything(store: Store) -> None:
    assert _ask(store, "free.example.com", 500) == 500


def test_the_rate_bucket_starts_full_then_refills_at_the_rate(store: Store) -> None:
    _set(store, "api.example.com", rate=20.0, burst=5)
    assert _ask(store, "api.example.com", 50) == 5
    assert _ask(store, "api.example.com", 50) == 0
    time.sleep(0.35)  # 20/s: about 7 tokens, capped at the burst of 5
    assert _ask(store, "api.example.com", 50) == 5
    time.sleep(0.12)  # about 2 tokens
    assert 1 <= _ask(store, "api.example.com", 50) <= 3


def test_in_flight_slots_count_until_the_attempt_ends_however_it_ends(store: Store) -> None:
    _set(store, "slow.example.com", max_in_flight=2)
    ids = _runs(store, "slow.example.com", 4)
    assert _ask(store, "slow.example.com", 4, ids) == 2
    assert _ask(store, "slow.example.com", 2, ids[2:]) == 0  # two on their way
    with store.engine.begin() as conn:
        # The first is claimed and running (still counts), the second ends as succeeded.
        conn.execute(
            text(
                "UPDATE runs SET state = 'running', attempt = 1, lease_token = gen_random_uuid(), "
                "lease_expires_at = now() + interval '1 minute' WHERE run_id = :id"
            ),
            {"id": ids[0]},
        )
        conn.execute(
            text(
                "UPDATE runs SET state = 'succeeded', attempt = 1, finished_at = now() "
                "WHERE run_id = :id"
            ),
            {"id": ids[1]},
        )
    assert _ask(store, "slow.example.com", 2, ids[2:]) == 1
    with store.engine.begin() as conn:
        # The running one's lease expires and it is retried later: attempt 1 ended.
        conn.execute(text("UPDATE runs SET state = 'scheduled' WHERE run_id = :id"), {"id": ids[0]})
    assert _ask(store, "slow.example.com", 1, ids[3:]) == 1
    with store.engine.begin() as conn:
        left = conn.execute(text("SELECT count(*) FROM target_slots")).scalar_one()
    assert left == 2  # the ended ones were pruned: ids[2] and ids[3] hold their slots


def test_the_default_row_limits_every_target_without_its_own(store: Store) -> None:
    _set(store, "*", rate=1.0, burst=2)
    assert _ask(store, "a.example.com", 10) == 2
    assert _ask(store, "b.example.com", 10) == 2  # a bucket per target, not one for all
    assert _ask(store, "a.example.com", 10) == 0
    _set(store, "a.example.com", rate=1000.0)  # its own rate; the burst stays the default's
    assert _ask(store, "a.example.com", 10) == 2
    with store.tx() as tx:
        assert flow.unset_limits(tx.conn, "*")
        assert not flow.unset_limits(tx.conn, "*")
    assert _ask(store, "c.example.com", 10) == 10


def test_concurrent_dispatchers_share_one_limit(store: Store) -> None:
    """Eight threads asking at once, many times: the total granted never exceeds the bucket
    plus what the rate refilled during the test."""
    _set(store, "shared.example.com", rate=50.0, burst=10)
    total = 0
    lock = threading.Lock()
    started = time.monotonic()

    def ask() -> None:
        nonlocal total
        for _ in range(15):
            got = _ask(store, "shared.example.com", 7)
            with lock:
                total += got

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    assert total <= 10 + 50.0 * elapsed + 1
    assert total >= 10


def test_overview_lists_limits_in_flight_and_waiting_runs(store: Store) -> None:
    _set(store, "*", rate=100.0)
    _set(store, "slow.example.com", max_in_flight=3)
    ids = _runs(store, "slow.example.com", 2)
    assert _ask(store, "slow.example.com", 2, ids) == 2
    store.targets_report_waiting("dispatcher-a", {"slow.example.com": 40})
    store.targets_report_waiting("dispatcher-b", {"slow.example.com": 2, "other": 0})
    with store.tx() as tx:
        rows = {o.target_service: o for o in flow.overview(tx.conn)}
    assert next(iter(rows)) == "*"
    slow = rows["slow.example.com"]
    assert slow.limit == TargetLimit(max_in_flight=3)
    assert (slow.in_flight, slow.throttled) == (2, 42)
    store.targets_report_waiting("dispatcher-a", {})
    with store.tx() as tx:
        assert {o.target_service: o for o in flow.overview(tx.conn)}[
            "slow.example.com"
        ].throttled == 2


def test_a_claim_records_when_the_attempt_was_released_and_how_long_it_was_throttled(
    store: Store,
) -> None:
    [run_id] = _runs(store, "api.example.com", 1)
    with store.engine.begin() as conn:
        scheduled_for = conn.execute(
            text("SELECT scheduled_for FROM runs WHERE run_id = :id"), {"id": run_id}
        ).scalar_one()
    released = datetime.now(UTC).replace(microsecond=0)
    request = ClaimRequest(
        run_id,
        scheduled_for,
        1,
        uuid.uuid4(),
        timedelta(seconds=30),
        released_at=released,
        throttled_ms=1250,
    )
    assert store.runs_claim_batch("worker-1", [request])
    with store.engine.begin() as conn:
        row = conn.execute(
            text("SELECT released_at, throttled_ms FROM runs WHERE run_id = :id"), {"id": run_id}
        ).one()
    assert (row.released_at, row.throttled_ms) == (released, 1250)
