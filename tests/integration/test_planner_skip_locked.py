"""Two planners in SKIP LOCKED mode (no etcd) on one database, at the same time.

Without etcd every planner scans every shard, and what keeps two of them from planning one
occurrence twice is the due scan's ``FOR UPDATE SKIP LOCKED`` and the runs' UNIQUE(job_id,
scheduled_for). This test runs two planners, each with its own connections and producer, on
threads over the same every-second jobs for a few seconds, then checks invariant I1: exactly one
run per expected occurrence, none missing (an anti-join of the expected occurrences against the
runs), none extra (the other way round), none twice.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from duetime.bus.kafka import producer_config
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner, PlanStats

pytestmark = pytest.mark.integration

JOBS = 200
RUN_FOR = 5.0  # seconds both planners plan
# No refill and small batches: every round revisits every job, in many short transactions, so
# the two planners' scans keep meeting on the same rows.
CONFIG = PlannerConfig(
    lookahead=timedelta(seconds=2),
    refill=timedelta(0),
    batch_size=20,
    sweep_interval=timedelta(hours=1),
)


class _PlannerThread(threading.Thread):
    """Runs ``run_once`` until told to stop; keeps the sum of its stats, or what it raised."""

    def __init__(self, planner: Planner, start: threading.Barrier, stop: threading.Event) -> None:
        super().__init__(name=f"planner-{planner.member}", daemon=True)
        self.planner = planner
        self.start_together = start
        self.stop_event = stop
        self.stats = PlanStats()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.start_together.wait(timeout=10)
            while not self.stop_event.is_set():
                self.stats += self.planner.run_once()
                self.rounds += 1
                self.stop_event.wait(0.05)  # the loop's pace, as the service's tick
        except BaseException as exc:
            self.error = exc


def _every_second(job_id: str) -> Any:
    return parse_job(
        {
            "id": job_id,
            "schedule": {"interval": "PT1S"},
            "catch_up": "all",
            "target": {"http": {"url": "https://example.com/hook"}},
        }
    )


def test_two_planners_plan_every_occurrence_exactly_once(
    env: tuple[Settings, Store, Producer], database_url: str
) -> None:
    settings, store, producer = env
    with store.tx() as tx:
        jobs_apply(tx, [_every_second(f"job-{i:03d}") for i in range(JOBS)])
    with store.engine.begin() as conn:
        first = {r.job_id: r.next_run_at for r in conn.execute(text("SELECT * FROM jobs"))}
    assert len(first) == JOBS and all(first.values())

    other_store = Store(database_url, pool_size=2)
    other_producer = Producer(producer_config(settings))
    catalog = TopicCatalog(settings.topic_prefix)
    planners = [
        Planner(store, producer, catalog, CONFIG, member="p1"),
        Planner(other_store, other_producer, catalog, CONFIG, member="p2"),
    ]
    today = datetime.now(UTC).date()
    for planner in planners:
        planner.ensure_partitions(today)
        planner.ensure_partitions(today + timedelta(days=1))  # a run just past midnight
    start, stop = threading.Barrier(len(planners)), threading.Event()
    threads = [_PlannerThread(planner, start, stop) for planner in planners]
    try:
        for thread in threads:
            thread.start()
        time.sleep(RUN_FOR)  # how long the planners run, not a wait for an outcome
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        other_store.close()
    assert not any(t.is_alive() for t in threads)
    for thread in threads:
        assert thread.error is None, f"{thread.name} failed: {thread.error!r}"
    summary = {t.name: (t.rounds, t.stats.jobs_planned, t.stats.runs_created) for t in threads}
    # Both planners did work: SKIP LOCKED shares the due jobs out, it does not serialise them.
    assert all(t.stats.jobs_planned > 0 and t.stats.runs_created > 0 for t in threads), summary

    with store.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TEMP TABLE expected ON COMMIT DROP AS "
                "SELECT j.job_id, generate_series(f.first_at, j.last_scheduled_for, "
                "interval '1 second') AS scheduled_for "
                "FROM jobs j JOIN unnest(CAST(:ids AS text[]), CAST(:firsts AS timestamptz[])) "
                "AS f(job_id, first_at) USING (job_id)"
            ),
            {"ids": list(first), "firsts": list(first.values())},
        )
        expected = conn.execute(text("SELECT count(*) FROM expected")).scalar_one()
        runs = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
        missing = conn.execute(
            text(
                "SELECT e.job_id, e.scheduled_for FROM expected e WHERE NOT EXISTS "
                "(SELECT 1 FROM runs r WHERE r.job_id = e.job_id "
                "AND r.scheduled_for = e.scheduled_for) LIMIT 5"
            )
        ).all()
        extra = conn.execute(
            text(
                "SELECT r.job_id, r.scheduled_for FROM runs r WHERE NOT EXISTS "
                "(SELECT 1 FROM expected e WHERE e.job_id = r.job_id "
                "AND e.scheduled_for = r.scheduled_for) LIMIT 5"
            )
        ).all()
        twice = conn.execute(
            text(
                "SELECT job_id, scheduled_for, count(*) FROM runs "
                "GROUP BY job_id, scheduled_for HAVING count(*) > 1 LIMIT 5"
            )
        ).all()
        gaps = conn.execute(text("SELECT count(*) FROM occurrence_gaps")).scalar_one()
    assert (missing, extra, twice, gaps) == ([], [], [], 0)
    assert runs == expected
    # Every job was planned several seconds ahead by one planner or the other, and the runs the
    # two created add up to the runs in the table: no insert was lost to a conflict unnoticed.
    assert expected >= JOBS * int(RUN_FOR), summary
    assert sum(t.stats.runs_created for t in threads) == runs, summary
