"""Runs leave the database: old partitions archived to a real S3 server (SeaweedFS), verified,
dropped, and found again with ``duetime runs list --archived``."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from duetime.archive.archiver import ArchiveConfig, Archiver
from duetime.archive.codec import decode_runs, sha256_hex
from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.bus.topics import TopicCatalog
from duetime.cli.main import main
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.store import Store
from duetime.store.archive import archive_lock
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner
from duetime_reaper.archiving import make_periodic_archive
from tests.fixtures.polling import wait_for
from tests.fixtures.s3 import S3Server

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)
OLD = (NOW - timedelta(days=10)).date()
OLDER = (NOW - timedelta(days=11)).date()
RECENT = NOW.date()
# Names a user chose: they must end up inside the objects, never in a key.
EVIL_JOBS = ("../../etc/passwd", "/absolute/job", "a/../../b", "nightly-report")
_KEY = re.compile(r"t[0-9a-f]{8}/runs/day=\d{4}-\d{2}-\d{2}/[0-9a-f]{64}\.(avro|json)")


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def archive_env(
    database_url: str,
    s3_server: S3Server,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Store]:
    """The CLI pointed at this test's database and the session's S3 server, under a key prefix
    of this test's own; a store on the same database."""
    monkeypatch.setenv("DUETIME_DATABASE_URL", database_url)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    for key, value in s3_server.env(prefix).items():
        monkeypatch.setenv(key, value)
    store = Store(database_url, pool_size=2)
    yield store
    store.close()


def _objects(s3_server: S3Server, prefix: str) -> S3ObjectStore:
    return S3ObjectStore(S3Settings.require(env=s3_server.env(prefix)))


def _at(day: date, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=UTC)


def _insert_run(
    store: Store,
    job_id: str,
    scheduled_for: datetime,
    *,
    state: str = "succeeded",
    attempts: int = 1,
) -> uuid.UUID:
    run_id = uuid.uuid4()
    with store.tx() as tx:
        tx.runs_ensure_partition(scheduled_for.date())
        tx.conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at,"
                " state, attempt, max_attempts, started_at, finished_at, last_error)"
                " VALUES (:run_id, :job_id, 'acme', 'api.example.com', :at, :at, :state,"
                " :attempt, 3, :at, :at, :error)"
            ),
            {
                "run_id": run_id,
                "job_id": job_id,
                "at": scheduled_for,
                "state": state,
                "attempt": attempts if state != "scheduled" else 0,
                "error": "HTTP 500" if attempts > 1 else None,
            },
        )
        if state != "scheduled":
            for n in range(1, attempts + 1):
                tx.conn.execute(
                    text(
                        "INSERT INTO run_attempts (run_id, scheduled_for, attempt, job_id, worker,"
                        " lease_token, started_at, finished_at, outcome, status_code,"
                        " duration_ms) VALUES (:run_id, :at, :n, :job_id, 'w-1', :token, :at,"
                        " :at, :outcome, :status, 12)"
                    ),
                    {
                        "run_id": run_id,
                        "at": scheduled_for,
                        "n": n,
                        "job_id": job_id,
                        "token": uuid.uuid4(),
                        "outcome": "succeeded" if n == attempts else "failed",
                        "status": 200 if n == attempts else 500,
                    },
                )
    return run_id


def _partition_exists(store: Store, day: date) -> bool:
    with store.tx() as tx:
        name = f"runs_p{day:%Y%m%d}"
        return tx.conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar() is not None


def _count(store: Store, table: str, day: date) -> int:
    lower = _at(day, 0)
    with store.tx() as tx:
        value = tx.conn.execute(
            text(
                f"SELECT count(*) FROM {table} WHERE scheduled_for >= :lo AND scheduled_for < :hi"
            ),
            {"lo": lower, "hi": lower + timedelta(days=1)},
        ).scalar()
    return int(value or 0)


def _seed(store: Store) -> dict[str, list[uuid.UUID]]:
    runs: dict[str, list[uuid.UUID]] = {job: [] for job in EVIL_JOBS}
    for hour, job in enumerate(EVIL_JOBS):
        runs[job].append(_insert_run(store, job, _at(OLD, hour), attempts=2))
        runs[job].append(_insert_run(store, job, _at(OLDER, hour), state="dead", attempts=3))
    runs["nightly-report"].append(_insert_run(store, "nightly-report", _at(RECENT, 0)))
    return runs


def test_archive_writes_verified_objects_drops_partitions_and_finds_runs_again(
    archive_env: Store,
    s3_server: S3Server,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = archive_env
    runs = _seed(store)

    assert main(["archive", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    archived = {r["day"]: r for r in report if r["action"] == "archived"}
    assert set(archived) == {OLD.isoformat(), OLDER.isoformat()}
    assert {r["rows"] for r in archived.values()} == {len(EVIL_JOBS)}

    # The objects: keys made of the prefix, dates and digests only; each data object's name is
    # its SHA-256 and it decodes to the rows its manifest counts, attempts included.
    objects = _objects(s3_server, prefix)
    keys = objects.list_keys(prefix)
    assert len(keys) == 4
    for key in keys:
        assert _KEY.fullmatch(key), key
        assert not any(job.strip("/") in key for job in EVIL_JOBS[:3])
    for key in (k for k in keys if k.endswith(".json")):
        manifest = json.loads(objects.get(key))
        data = objects.get(key.replace(".json", ".avro"))
        assert sha256_hex(data) == manifest["sha256"] == key.rsplit("/", 1)[-1][:-5]
        decoded = decode_runs(data)
        assert len(decoded) == manifest["rows"] == len(EVIL_JOBS)
        assert sorted(manifest["job_ids"]) == sorted(EVIL_JOBS)
        assert sum(len(r.attempts) for r in decoded) == manifest["attempts"]

    # The partitions and their attempts are gone; today's partition is untouched.
    for day in (OLD, OLDER):
        assert not _partition_exists(store, day)
        assert _count(store, "run_attempts", day) == 0
    assert _partition_exists(store, RECENT)
    assert _count(store, "runs", RECENT) == 1

    # Found again through the archive, with their attempts.
    assert main(["runs", "list", "--job", "../../etc/passwd", "--archived", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert {r["run_id"] for r in found} == {str(r) for r in runs["../../etc/passwd"]}
    assert [r["scheduled_for"][:10] for r in found] == [OLD.isoformat(), OLDER.isoformat()]
    dead = next(r for r in found if r["state"] == "dead")
    assert [a["outcome"] for a in dead["attempts"]] == ["failed", "failed", "succeeded"]

    # --since narrows the days read.
    since = _at(OLD, 0).isoformat()
    assert (
        main(["runs", "list", "--job", "nightly-report", "--archived", "--json", "--since", since])
        == 0
    )
    assert [r["scheduled_for"][:10] for r in json.loads(capsys.readouterr().out)] == [
        OLD.isoformat()
    ]

    # A second run finds nothing left to do.
    assert main(["archive", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert len(objects.list_keys(prefix)) == 4


def test_dry_run_changes_nothing(
    archive_env: Store, s3_server: S3Server, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = archive_env
    _seed(store)
    assert main(["archive", "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {(r["day"], r["action"], r["rows"]) for r in report} == {
        (OLD.isoformat(), "would_archive", len(EVIL_JOBS)),
        (OLDER.isoformat(), "would_archive", len(EVIL_JOBS)),
    }
    assert _objects(s3_server, prefix).list_keys(prefix) == []
    assert _partition_exists(store, OLD) and _partition_exists(store, OLDER)
    assert _count(store, "runs", OLD) == len(EVIL_JOBS)
    assert _count(store, "run_attempts", OLD) == 2 * len(EVIL_JOBS)


class _CorruptingStore:
    """The real S3 client, except that data objects are uploaded with one byte changed: an
    upload damaged on the way, which only the read-back can notice."""

    def __init__(self, inner: S3ObjectStore) -> None:
        self.inner = inner

    def put(self, key: str, data: bytes) -> None:
        if key.endswith(".avro"):
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        return self.inner.list_keys(prefix)


def test_verification_failure_leaves_the_partition(
    archive_env: Store, s3_server: S3Server, prefix: str
) -> None:
    store = archive_env
    _insert_run(store, "nightly-report", _at(OLD, 3))
    archiver = Archiver(
        store, _CorruptingStore(_objects(s3_server, prefix)), ArchiveConfig(prefix=prefix)
    )
    report = archiver.run_once(NOW)
    assert [(p.day, p.action) for p in report.partitions] == [(OLD, "failed")]
    assert "SHA-256" in (report.partitions[0].reason or "")
    assert _partition_exists(store, OLD)
    assert _count(store, "runs", OLD) == 1
    assert _count(store, "run_attempts", OLD) == 1

    # The next run with an intact upload archives it, under the same kind of key.
    clean = Archiver(store, _objects(s3_server, prefix), ArchiveConfig(prefix=prefix))
    assert [p.action for p in clean.run_once(NOW).partitions] == ["archived"]
    assert not _partition_exists(store, OLD)


def test_partition_with_unfinished_runs_is_held(
    archive_env: Store, s3_server: S3Server, prefix: str
) -> None:
    store = archive_env
    _insert_run(store, "nightly-report", _at(OLD, 1))
    _insert_run(store, "stuck", _at(OLD, 2), state="scheduled")
    archiver = Archiver(store, _objects(s3_server, prefix), ArchiveConfig(prefix=prefix))
    report = archiver.run_once(NOW)
    assert [(p.day, p.action, p.rows) for p in report.partitions] == [(OLD, "held", 2)]
    assert _partition_exists(store, OLD)
    assert _objects(s3_server, prefix).list_keys(prefix) == []


def test_a_second_archiver_waits_its_turn(
    archive_env: Store, s3_server: S3Server, prefix: str
) -> None:
    store = archive_env
    _insert_run(store, "nightly-report", _at(OLD, 1))
    archiver = Archiver(store, _objects(s3_server, prefix), ArchiveConfig(prefix=prefix))
    other = Store(store.engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        with archive_lock(other) as locked:
            assert locked
            report = archiver.run_once(NOW)
            assert not report.ran and report.partitions == []
            assert _partition_exists(store, OLD)
    finally:
        other.close()
    assert [p.action for p in archiver.run_once(NOW).partitions] == ["archived"]


def test_before_may_not_reach_yesterday(
    archive_env: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["archive", "--before", NOW.date().isoformat()]) == 2
    assert "--before" in capsys.readouterr().err
    assert main(["archive", "--before", "not-a-date"]) == 2


def test_the_reapers_archive_thread_archives_and_a_second_one_finds_the_lock_taken(
    archive_env: Store, s3_server: S3Server, prefix: str
) -> None:
    store = archive_env
    _insert_run(store, "nightly-report", _at(OLD, 1))
    env = {**s3_server.env(prefix), "DUETIME_ARCHIVE_FIRST_DELAY": "0"}
    threads = [make_periodic_archive(store, env), make_periodic_archive(store, env)]
    assert all(t is not None for t in threads)
    for t in threads:
        assert t is not None
        t.start()
    try:
        wait_for("the partition archived", lambda: not _partition_exists(store, OLD) or None)
    finally:
        for t in threads:
            assert t is not None
            t.stop()
    keys = _objects(s3_server, prefix).list_keys(prefix)
    assert len(keys) == 2  # one data object and its manifest: archived once


def test_the_reaper_archives_nothing_without_object_storage(archive_env: Store) -> None:
    assert make_periodic_archive(archive_env, {"DUETIME_DATA_DIR": "/nonexistent"}) is None
    assert make_periodic_archive(archive_env, {"DUETIME_ARCHIVE_INTERVAL": "off"}) is None


def test_the_planner_plans_into_a_day_the_archive_dropped(
    archive_env: Store,
    s3_server: S3Server,
    prefix: str,
    env: tuple[Settings, Store, Producer],
) -> None:
    """A planner that created an old day's partition (a one-off job due long ago) does not
    remember it: after the archive dropped it, the next run for that day gets it back."""
    settings, store, producer = env
    planner = Planner(store, producer, TopicCatalog(settings.topic_prefix), PlannerConfig())
    planner.ensure_partitions(NOW.date())

    def plan_one_off(job_id: str, at: datetime) -> None:
        job = parse_job(
            {
                "id": job_id,
                "schedule": {"at": at.isoformat()},
                "target": {"http": {"url": "https://example.com/hook"}},
            }
        )
        with store.tx() as tx:
            jobs_apply(tx, [job])
        assert planner.run_once().runs_created == 1

    plan_one_off("first", _at(OLD, 1))
    with store.tx() as tx:
        tx.conn.execute(text("UPDATE runs SET state = 'succeeded' WHERE job_id = 'first'"))
    archiver = Archiver(store, _objects(s3_server, prefix), ArchiveConfig(prefix=prefix))
    assert [p.action for p in archiver.run_once(NOW).partitions] == ["archived"]
    assert not _partition_exists(store, OLD)

    plan_one_off("second", _at(OLD, 2))
    assert _count(store, "runs", OLD) == 1


def test_the_occurrence_ledger_reads_archived_days(
    archive_env: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """``runs list --all-occurrences`` over days the archive took out of the database: the
    occurrences show the runs that executed, as before the archive, not ``missed``."""
    store = archive_env
    job = parse_job(
        {
            "id": "nightly-report",
            "schedule": {"cron": "0 3 * * *"},
            "target": {"http": {"url": "https://example.com/hook"}},
        }
    )
    with store.tx() as tx:
        jobs_apply(tx, [job])
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET created_at = now() - interval '20 days' WHERE job_id = :j"),
            {"j": "nightly-report"},
        )
    succeeded = _insert_run(store, "nightly-report", _at(OLD, 3), attempts=2)
    dead = _insert_run(store, "nightly-report", _at(OLDER, 3), state="dead", attempts=3)
    since, until = _at(OLDER, 0), _at(OLD, 0) + timedelta(days=1)
    args = ["runs", "list", "--job", "nightly-report", "--all-occurrences", "--json"]
    args += ["--since", since.isoformat(), "--until", until.isoformat()]

    def ledger() -> list[tuple[str, str, str | None, int | None]]:
        assert main(args) == 0
        lines = json.loads(capsys.readouterr().out)
        return [
            (ln["scheduled_for"][:13], ln["status"], ln["run_id"], ln["attempt"]) for ln in lines
        ]

    expected = [
        (f"{OLD.isoformat()}T03", "succeeded", str(succeeded), 2),
        (f"{OLDER.isoformat()}T03", "dead", str(dead), 3),
    ]
    assert ledger() == expected
    assert main(["archive", "--json"]) == 0
    assert {r["day"] for r in json.loads(capsys.readouterr().out)} == {
        OLD.isoformat(),
        OLDER.isoformat(),
    }
    assert not _partition_exists(store, OLD) and not _partition_exists(store, OLDER)
    assert ledger() == expected
