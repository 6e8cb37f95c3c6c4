"""Job definitions into a running system: a file through ``duetime jobs apply``, and the same
number of definitions through the jobs topic.

``python -m bench ingest [--n N] [--json PATH] [--report PATH]`` (``make bench-ingest``): a fresh
``duetime up`` (as the spike benchmark starts it), then

- **apply**: N daily cron jobs (``0 0 * * *`` in ten IANA zones, Kafka targets, ten tenants) in
  one JSON file, applied by the ``duetime jobs apply`` command in its own process, as a user runs
  it against the stack; the wall time of that command;
- **topic**: N other such jobs produced onto ``<prefix>jobs`` as Avro records, each signed with
  its tenant's key (the guard ``duetime up`` turns on), produced as fast as the producer takes
  them; the time from the first produce call until PostgreSQL holds the last job, and how many
  records ``<prefix>jobs.rejected`` received (it must be none). The records are encoded and
  signed before the clock starts: that is the producing application's work, not duetime's.

Both are measured with the system running its services, nothing else due. Writes
bench/results/ingest.json and bench/reports/ingest.md. The issue's bound: 100k jobs in at most
10 s, each way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from sqlalchemy import text

from duetime.bus.kafka import consumer_config, message_headers, producer_config
from duetime.bus.records import JOB_DEFINITIONS, JOB_REJECTIONS
from duetime.bus.topics import TopicCatalog
from duetime.cli.topic_secret import topic_secret
from duetime.jobdef import parse_job
from duetime.jobs_guard import signature_headers, tenant_key
from duetime.store import Store

from .spike_system import DuetimeUp

ROOT = Path(__file__).resolve().parent
BOUND_S = 10.0
ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Europe/London",
    "Africa/Johannesburg",
    "Pacific/Auckland",
)


def documents(prefix: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    """``n`` daily cron jobs at midnight in ten zones, to a Kafka topic, in ten tenants."""
    return [
        {
            "id": f"{prefix}{i:07d}",
            "tenant": f"t{i % 10}",
            "schedule": {"cron": "0 0 * * *", "time_zone": ZONES[i % len(ZONES)]},
            "target": {"kafka": {"topic": "bench.ingest", "key": f"{i}", "value": "{}"}},
            **extra,
        }
        for i in range(n)
    ]


def stored(store: Store, prefix: str) -> int:
    with store.engine.begin() as conn:
        row = conn.execute(
            text("SELECT count(*) AS n FROM jobs WHERE job_id LIKE :p"), {"p": prefix + "%"}
        ).one()
    return int(row.n)


def apply_file(up: DuetimeUp, work: Path, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """``duetime jobs apply FILE`` in its own process; its wall time and what it printed."""
    path = work / "jobs.json"
    path.write_text(json.dumps(docs), encoding="utf-8")
    script = Path(sys.executable).with_name("duetime")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "duetime.cli.main"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    env["DUETIME_DATA_DIR"] = str(up.data_dir)
    started = time.monotonic()
    done = subprocess.run(
        [*command, "jobs", "apply", "--json", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"duetime jobs apply failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"apply_s": round(took, 2), "file_mb": round(path.stat().st_size / 2**20, 1)}


def _encoded(up: DuetimeUp, docs: list[dict[str, Any]]) -> list[tuple[bytes, bytes, Any]]:
    """(key, value, headers) of each definition, signed with its tenant's key."""
    secret = topic_secret(os.environ, up.data_dir)
    keys: dict[str, str] = {}
    records = []
    for doc in docs:
        job = parse_job(doc)
        tenant = job.tenant
        key = keys.setdefault(tenant, tenant_key(secret, tenant)) if secret else ""
        record_key, value = job.job_id.encode(), JOB_DEFINITIONS.encode(job)
        headers = list(JOB_DEFINITIONS.headers())
        if secret:
            headers += signature_headers(key, tenant, record_key, value)
        records.append((record_key, value, headers))
    return records


def _rejected(up: DuetimeUp, catalog: TopicCatalog) -> tuple[int, dict[str, int]]:
    """Records on ``jobs.rejected``, read from its start by a consumer of its own until the
    topic stays quiet for 2 s (not from the end offsets: the embedded broker reports them
    wrong for batches of several records, ../shared/KAFKA.md), and how many of each reason."""
    settings = up.settings()
    group = f"bench-ingest-{time.monotonic_ns()}"
    consumer = Consumer(consumer_config(settings, group))
    count, quiet_since, reasons = 0, time.monotonic(), Counter[str]()
    try:
        topic = consumer.list_topics(catalog.jobs_rejected, timeout=10).topics.get(
            catalog.jobs_rejected
        )
        if topic is None or topic.error is not None:
            return 0, {}
        consumer.assign(
            [TopicPartition(catalog.jobs_rejected, p, OFFSET_BEGINNING) for p in topic.partitions]
        )
        while time.monotonic() - quiet_since < 2.0:
            messages = consumer.consume(1000, 0.2)
            records = [m for m in messages if m.error() is None]
            for record in records:
                rejection = JOB_REJECTIONS.decode(record.value(), message_headers(record))
                reasons[f"{rejection.field}: {rejection.reason}"] += 1
            if records:
                count += len(records)
                quiet_since = time.monotonic()
        return count, dict(reasons.most_common(3))
    finally:
        consumer.close()


def through_topic(
    up: DuetimeUp, store: Store, prefix: str, docs: list[dict[str, Any]], timeout: float
) -> dict[str, Any]:
    settings = up.settings()
    catalog = TopicCatalog(settings.topic_prefix)
    encode_started = time.monotonic()
    records = _encoded(up, docs)
    encode_s = time.monotonic() - encode_started
    producer = Producer(producer_config(settings))
    started = time.monotonic()
    for record_key, value, headers in records:
        while True:
            try:
                producer.produce(catalog.jobs, value, record_key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    produced_s = time.monotonic() - started
    n = len(docs)
    count = 0
    while time.monotonic() - started < timeout:
        count = stored(store, prefix)
        if count >= n:
            break
        time.sleep(0.1)
    took = time.monotonic() - started
    rejected, reasons = _rejected(up, catalog)
    return {
        "encode_s": round(encode_s, 2),
        "produce_s": round(produced_s, 2),
        "stored_s": round(took, 2) if count >= n else None,
        "stored": count,
        "rejected": rejected,
        "rejected_reasons": reasons,
    }


def run(n: int, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="duetime-ingest-"))
    up = DuetimeUp(work / "data", work / "up.log")
    store: Store | None = None
    result: dict[str, Any] = {"n": n}
    notes: list[str] = []
    try:
        up.start()
        up.wait_ready(300)
        settings = up.settings()
        store = Store(settings.require_database(), pool_size=2, application_name="bench-ingest")
        up.wait_joined(quiet=3.0, timeout=60.0)
        result["apply"] = apply_file(up, work, documents("apply-", n))
        result["apply"]["stored"] = stored(store, "apply-")
        result["topic"] = through_topic(
            # On the topic a definition carries its version (upsert by version).
            up,
            store,
            "topic-",
            documents("topic-", n, version=1),
            timeout,
        )
    finally:
        if store is not None:
            store.close()
        clean = up.stop()
        if not clean:
            notes.append("duetime up did not stop cleanly; its processes were killed")
        if clean and os.environ.get("DUETIME_BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            notes.append(f"logs kept in {work}")
    result["notes"] = notes
    return result


def _verdict(seconds: float | None) -> str:
    if seconds is None:
        return "**missed** (not all stored)"
    if seconds <= BOUND_S:
        return "**met**"
    return f"**missed** by {seconds - BOUND_S:.1f} s"


def report(result: dict[str, Any]) -> str:
    n, apply, topic = result["n"], result["apply"], result["topic"]
    lines = [
        "# Ingest benchmark",
        "",
        "Written by `make bench-ingest` (bench/bench_ingest.py); the figures are in "
        "bench/results/ingest.json.",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"python {platform.python_version()}",
        "- set-up: a fresh `duetime up` (embedded PostgreSQL, broker and etcd, the services "
        "with their defaults); the jobs are daily crons at midnight in ten zones to a Kafka "
        "topic, in ten tenants. The jobs topic is guarded (`duetime up` makes its secret): "
        "each record carries its tenant's signature.",
        "",
        "| path | jobs | bound | measured | verdict |",
        "|---|---:|---|---|---|",
        f"| `duetime jobs apply` of one JSON file ({apply['file_mb']} MiB) | {n:,} | "
        f"≤ {BOUND_S:.0f} s | {apply['apply_s']:.1f} s | {_verdict(apply['apply_s'])} |",
        f"| the jobs topic: first produce → last job stored | {n:,} | ≤ {BOUND_S:.0f} s | "
        + (f"{topic['stored_s']:.1f} s" if topic["stored_s"] is not None else "–")
        + f" | {_verdict(topic['stored_s'])} |",
        "",
        f"- apply: {apply['stored']:,} of {n:,} jobs stored afterwards.",
        f"- topic: the producer took {topic['produce_s']:.1f} s to hand over the {n:,} records "
        f"(encoding and signing them before the clock started took {topic['encode_s']:.1f} s); "
        f"{topic['stored']:,} jobs stored; {topic['rejected']} records on `jobs.rejected`.",
    ]
    lines += [f"  - rejected {n:,}: {why}" for why, n in topic["rejected_reasons"].items()]
    lines += [f"- note: {note}" for note in result["notes"]]
    return "\n".join(lines) + "\n"


def ingest_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ingest", description=__doc__)
    parser.add_argument("--n", type=int, default=100_000, help="jobs each way")
    parser.add_argument("--timeout", type=float, default=300.0, help="for the topic's jobs (s)")
    parser.add_argument("--json", type=Path, default=ROOT / "results" / "ingest.json")
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "ingest.md")
    args = parser.parse_args(argv)
    result = run(args.n, args.timeout)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report(result), encoding="utf-8")
    print(report(result), end="", flush=True)
    print(f"wrote {args.json} and {args.report}", flush=True)
    return 0


def main() -> None:
    """``python -m bench`` runs every module: this one with its defaults."""
    ingest_command([])
