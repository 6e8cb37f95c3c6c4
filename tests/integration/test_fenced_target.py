"""The fenced target of docs/targets.md (examples/fenced_target.py) on real PostgreSQL.

First its rules, called directly; then as an HTTP target of a real worker, where attempt 1's
request is held at the target while the reaper expires its lease and attempt 2 runs, so that
the zombie's request reaches the database after its successor's, and is rejected.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server
from wsgiref.types import StartResponse, WSGIEnvironment

import psycopg
import pytest
from sqlalchemy import text

from duetime.bus.target_records import kafka_headers
from duetime.model import HttpTarget
from duetime_reaper.reaper import Reaper
from examples.fenced_target import (
    SCHEMA,
    WRITE,
    Execution,
    InvalidRequest,
    ThreadingWSGIServer,
    Verdict,
    headers_of_record,
    make_app,
    process,
)
from tests.integration.test_worker import (  # noqa: F401  (fixtures)
    WAIT,
    Env,
    InProcessWorker,
    env,
    state_is,
    wait_for,
    worker,
)

pytestmark = pytest.mark.integration

RUN_ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
SCHEDULED = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def _libpq(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def target_url(database_url: str) -> str:
    """The target's table, in this test's own database (a real target has a database of its
    own; sharing one changes nothing here)."""
    url = _libpq(database_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return url


@pytest.fixture
def conn(target_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(target_url, autocommit=True) as connection:
        yield connection


def _execution(attempt: int, token: int) -> Execution:
    return Execution(RUN_ID, attempt, token, SCHEDULED)


def _held(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT fencing_token, attempt, body FROM processed_runs WHERE run_id = %s", (RUN_ID,)
    ).fetchone()


@pytest.mark.parametrize(
    ("arrivals", "held"),
    [
        pytest.param(
            [((1, 2), b"first", Verdict.APPLIED), ((1, 2), b"again", Verdict.DUPLICATE)],
            (2, 1, b"first"),
            id="the same execution again changes nothing",
        ),
        pytest.param(
            [((1, 2), b"attempt 1", Verdict.APPLIED), ((2, 4), b"attempt 2", Verdict.APPLIED)],
            (4, 2, b"attempt 2"),
            id="a newer execution replaces an older one's work",
        ),
        pytest.param(
            [((2, 4), b"attempt 2", Verdict.APPLIED), ((1, 2), b"zombie", Verdict.FENCED)],
            (4, 2, b"attempt 2"),
            id="a zombie arriving after its successor is fenced",
        ),
    ],
)
def test_each_execution_is_judged_by_its_token(
    conn: psycopg.Connection[Any],
    arrivals: list[tuple[tuple[int, int], bytes, Verdict]],
    held: tuple[int, int, bytes],
) -> None:
    verdicts = [process(conn, _execution(*execution), body) for execution, body, _ in arrivals]
    assert verdicts == [verdict for _, _, verdict in arrivals]
    assert _held(conn) == held


def test_only_a_fenced_execution_is_refused() -> None:
    assert [v.http_status for v in Verdict] == ["200 OK", "200 OK", "409 Conflict"]


def _waiting_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.parametrize(
    ("first", "second", "verdict", "kept"),
    [
        ((1, 2), (2, 4), Verdict.APPLIED, (4, 2)),  # the successor waits, then replaces
        ((2, 4), (1, 2), Verdict.FENCED, (4, 2)),  # the zombie waits, then is fenced
    ],
)
def test_two_executions_at_the_same_moment_serialise_on_the_run(
    target_url: str,
    conn: psycopg.Connection[Any],
    first: tuple[int, int],
    second: tuple[int, int],
    verdict: Verdict,
    kept: tuple[int, int],
) -> None:
    """The first execution's transaction is still open when the second one writes: the second
    waits for it on the primary key, then judges by the token the first committed."""
    results: list[Verdict] = []
    with psycopg.connect(target_url, autocommit=True) as other:
        pid = other.info.backend_pid
        with conn.transaction():  # process()'s own transaction becomes a savepoint inside it
            assert process(conn, _execution(*first), b"first") is Verdict.APPLIED
            racer = threading.Thread(
                target=lambda: results.append(process(other, _execution(*second), b"second"))
            )
            racer.start()
            with psycopg.connect(target_url, autocommit=True) as observer:
                wait_for(lambda: _waiting_on_a_lock(observer, pid), "the second to wait")
        racer.join(WAIT)
    assert results == [verdict]
    assert _held(conn)[:2] == kept  # type: ignore[index]


def test_a_kafka_record_s_headers_describe_the_same_execution() -> None:
    record_headers = kafka_headers(RUN_ID, 2, 4, SCHEDULED)
    assert Execution.from_headers(headers_of_record(record_headers)) == _execution(2, 4)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Duetime-Run-Id": str(RUN_ID), "X-Duetime-Attempt": "1"},
        {
            "X-Duetime-Run-Id": "not-a-uuid",
            "X-Duetime-Attempt": "1",
            "X-Duetime-Fencing-Token": "2",
            "X-Duetime-Scheduled-For": "2026-03-29T01:30:00Z",
        },
    ],
)
def test_a_request_without_duetime_s_headers_is_invalid(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        Execution.from_headers(headers)


# --- the same target behind a real worker ------------------------------------------------------
class HeldFirstAttempt:
    """Wraps the target: attempt 1's request waits until ``release`` before it is processed, as
    a request from a worker that stalled after sending it; every answer is recorded."""

    def __init__(self, app: Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.answers: list[tuple[str, str, str]] = []  # (attempt, fencing token, status)
        self.lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        attempt = environ.get("HTTP_X_DUETIME_ATTEMPT", "")
        token = environ.get("HTTP_X_DUETIME_FENCING_TOKEN", "")
        if attempt == "1":
            self.arrived.set()
            self.release.wait(WAIT)

        def recording(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            with self.lock:
                self.answers.append((attempt, token, status))
            return start_response(status, headers, exc_info)

        return self.app(environ, recording)

    def answer_to(self, attempt: str) -> tuple[str, str, str] | None:
        with self.lock:
            return next((a for a in self.answers if a[0] == attempt), None)


@pytest.fixture
def served(target_url: str) -> Iterator[tuple[HeldFirstAttempt, str]]:
    gate = HeldFirstAttempt(make_app(target_url))
    server = make_server("127.0.0.1", 0, gate, server_class=ThreadingWSGIServer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield gate, f"http://127.0.0.1:{server.server_port}"
    finally:
        gate.release.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def test_a_zombie_worker_s_request_is_rejected_by_the_fenced_target(
    env: Env,  # noqa: F811
    worker: Callable[..., InProcessWorker],  # noqa: F811
    served: tuple[HeldFirstAttempt, str],
    target_url: str,
) -> None:
    gate, base = served
    run = env.new_run(
        HttpTarget(url=f"{base}/invoices", method="POST", body="attempt 1"),
        lease=timedelta(seconds=30),
        heartbeat=timedelta(seconds=10),
    )
    w = worker()
    env.publish(run)
    assert gate.arrived.wait(WAIT)
    # Attempt 1's lease runs out, as if its worker had stalled for all of it (moved to the past
    # between two heartbeats), and the reaper hands the run back by the database clock.
    with env.store.engine.begin() as db:
        db.execute(
            text(
                "UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = :r"
            ),
            {"r": run.run_id},
        )
    assert Reaper(env.store, env.producer, env.catalog).run_once().retried == 1

    # Attempt 2, as the planner's outbox publishes it after the expiry, runs to success.
    successor = replace(
        run,
        attempt=2,
        target=HttpTarget(url=f"{base}/invoices", method="POST", body="attempt 2"),
        lease=timedelta(seconds=30),
    )
    env.publish(successor)
    wait_for(state_is(env, run.run_id, "succeeded", attempt=2), "attempt 2 to succeed")
    assert gate.answer_to("2") == ("2", "4", "200 OK")

    # Now the zombie's request reaches the target's database: its token (2) is below the one
    # the row holds (4), so it changes nothing.
    gate.release.set()
    zombie = wait_for(lambda: gate.answer_to("1"), "the zombie's answer")
    assert zombie == ("1", "2", "409 Conflict")
    with psycopg.connect(target_url) as conn:
        row = conn.execute(
            "SELECT fencing_token, attempt, body FROM processed_runs WHERE run_id = %s",
            (run.run_id,),
        ).fetchone()
    assert row == (4, 2, b"attempt 2")
    # The zombie's worker ends attempt 1 without effect: the database rejects its completion
    # (or its next heartbeat finds the lease gone first).
    wait_for(
        lambda: w.service.stats["completion_fenced"] + w.service.stats["lease_lost"] == 1,
        "attempt 1 to end without effect",
    )
    row = env.run_row(run.run_id)
    assert (row.state, row.attempt) == ("succeeded", 2)


def test_docs_targets_md_shows_the_example_s_own_sql() -> None:
    """The worked example in docs/targets.md quotes the statements this file tests."""
    docs = (Path(__file__).parents[2] / "docs" / "targets.md").read_text(encoding="utf-8")
    assert SCHEMA.strip() in docs
    assert WRITE.strip() in docs
