"""Benchmark the shard fence's cost on the planner's statements (docs/failover.md).

Run from the repository root::

    python -m bench bench_fence

It starts an embedded PostgreSQL (and the rest of the embedded stack) in a temporary directory,
stores 5,000 due jobs and times, for one planning batch of 5,000:

* ``runs_insert_many`` and ``jobs_advance_many`` without tokens (SKIP LOCKED mode) and with the
  128 shards' tokens (etcd mode: every row's shard checked against ``shard_owners``);
* the first statement(s) of a planning transaction: ``db_now`` (SKIP LOCKED) against
  ``planner_tx_guard`` + ``shards_fence`` (etcd mode: lock the held fence rows FOR SHARE).

Each is run inside a transaction that is rolled back, fenced and unfenced alternately, so load on
a shared machine hits both alike; the minimum and the median of ``ROUNDS`` runs are reported in
``bench/reports/fence.md``.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from duetime.jobdef import parse_jobs
from duetime.sharding import SHARD_COUNT, shard_for
from duetime.store import NewRun, Store, Tx
from duetime.store.jobs import jobs_apply
from duetime.store.rows import batch_json
from duetime_infra import EmbeddedStack

REPORT_PATH = Path(__file__).parent / "reports" / "fence.md"
BATCH = 5000
ROUNDS = 15


class _Rollback(Exception):
    pass


def _timed(store: Store, work: Callable[[Tx], Any]) -> float:
    """Milliseconds ``work`` takes inside a transaction that is then rolled back."""
    elapsed = 0.0
    try:
        with store.tx() as tx:
            started = time.perf_counter()
            work(tx)
            elapsed = (time.perf_counter() - started) * 1000
            raise _Rollback
    except _Rollback:
        pass
    return elapsed


_SCAN = """
SELECT count(*) FROM json_to_recordset(CAST(:rows AS json)) AS u(shard_id smallint)
WHERE CAST(:tokens AS text) IS NULL
   OR u.shard_id IN (SELECT o.shard_id FROM shard_owners o
                     JOIN json_to_recordset(CAST(:tokens AS json))
                          AS t(shard_id smallint, token bigint)
                       ON t.shard_id = o.shard_id AND t.token = o.token)
"""


def _scan(tx: Tx, rows: str, tokens: str | None) -> int:
    return int(tx.conn.execute(text(_SCAN), {"rows": rows, "tokens": tokens}).scalar_one())


def run(store: Store) -> dict[str, list[float]]:
    at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    definitions = [
        {
            "id": f"fence-{i}",
            "schedule": {"at": at.isoformat()},
            "target": {"kafka": {"topic": "bench"}},
            "target_service": "kafka:bench",
        }
        for i in range(BATCH)
    ]
    tokens = {s: 1000 + s for s in range(SHARD_COUNT)}
    with store.tx() as tx:
        jobs_apply(tx, parse_jobs(definitions))
        tx.runs_ensure_partition(at.date())
        tx.shards_claim("bench", tokens)
    ids = [f"fence-{i}" for i in range(BATCH)]
    runs = [
        NewRun(uuid.uuid4(), job, "default", "kafka:bench", at, at, 3, shard_for(job))
        for job in ids
    ]
    # The fenced insert's extra work alone: the same JSON scan with and without its filter.
    shard_rows = batch_json([{"shard_id": shard_for(job)} for job in ids])
    token_rows = batch_json([{"shard_id": s, "token": t} for s, t in tokens.items()])
    advances = [(job, at + timedelta(days=1), at) for job in ids]
    cases: list[tuple[str, Callable[[Tx], Any]]] = [
        ("runs_insert_many, unfenced", lambda tx: tx.runs_insert_many(runs, None)),
        ("runs_insert_many, fenced", lambda tx: tx.runs_insert_many(runs, tokens)),
        ("jobs_advance_many, unfenced", lambda tx: tx.jobs_advance_many(advances, None)),
        ("jobs_advance_many, fenced", lambda tx: tx.jobs_advance_many(advances, tokens)),
        ("check alone: JSON scan, no filter", lambda tx: _scan(tx, shard_rows, None)),
        ("check alone: JSON scan, token filter", lambda tx: _scan(tx, shard_rows, token_rows)),
        ("db_now (unfenced transaction start)", lambda tx: tx.db_now()),
        (
            "planner_tx_guard + shards_fence (128 shards)",
            lambda tx: (
                tx.planner_tx_guard(timedelta(seconds=5)),
                tx.shards_fence("bench", tokens),
            ),
        ),
    ]
    timings: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(ROUNDS):
        for name, work in cases:
            timings[name].append(_timed(store, work))
    return timings


def render(timings: dict[str, list[float]]) -> str:
    lines = [
        "# Shard fence: cost per planning statement",
        "",
        "Written by `python -m bench bench_fence` (bench/bench_fence.py); docs/failover.md",
        "explains the fence. The two `check alone` rows time the fenced insert's extra work by",
        "itself: the same scan of the batch's JSON with and without the token filter.",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.machine()}, {platform.system()}; python {platform.python_version()}",
        f"- batch: {BATCH:,} runs / jobs over {SHARD_COUNT} shards; {ROUNDS} rounds, each statement"
        " in a rolled-back transaction, fenced and unfenced alternately",
        "",
        "| statement | min (ms) | median (ms) |",
        "|---|---:|---:|",
    ]
    for name, ms in timings.items():
        lines.append(f"| {name} | {min(ms):.1f} | {statistics.median(ms):.1f} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark, print the figures and write bench/reports/fence.md."""
    with tempfile.TemporaryDirectory(prefix="duetime-fence-") as tmp:
        stack = EmbeddedStack(Path(tmp), durable=False, die_with_owner=True)
        stack.up()
        try:
            store = Store(stack.urls().database_url, pool_size=2)
            try:
                timings = run(store)
            finally:
                store.close()
        finally:
            stack.down()
    for name, ms in timings.items():
        print(f"{name:<46} min {min(ms):7.1f} ms  median {statistics.median(ms):7.1f} ms")
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(render(timings), encoding="utf-8")
    print(f"report: {REPORT_PATH}")


if __name__ == "__main__":
    main()
