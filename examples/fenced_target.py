"""An HTTP target that keeps one result per run and never lets a stale execution overwrite it.

duetime executes every run at least once (docs/targets.md): a retry, a lost answer or a zombie
worker (one paused past its lease while the run was handed to another worker) can each bring a
run to this target again. Every request carries ``X-Duetime-Run-Id`` and
``X-Duetime-Fencing-Token``, a number that is higher for every later execution of the run. This
target keeps one row per run under a primary key, with the token of the execution whose work the
row holds, and writes it with one statement:

- no row yet: the work is done and the row inserted (200);
- a row with a lower token: this is a newer execution (a retry after an answer that never
  arrived, or the successor of a zombie): its work replaces the older one's (200);
- a row with the same token: the same execution again; nothing changes (200, so duetime stops);
- a row with a higher token: a zombie whose successor already wrote; nothing changes (409).

The work this example does is to keep the request body; put yours in the same transaction, where
``process`` says so, and it shares the row's fate: it happens once per accepted execution, and
never for a zombie. Two executions arriving at the same moment serialise on the primary key.

Run it next to a PostgreSQL database (the table is created if missing):

    python examples/fenced_target.py --database-url postgresql://localhost/targets --port 8080

and point a job's ``target.http.url`` at it. A consumer of a Kafka target's topic applies
``process`` the same way to each record, reading the execution from the record's headers with
:func:`headers_of_record`, and commits its offset whatever the verdict.
"""

from __future__ import annotations

import argparse
import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import psycopg

__all__ = [
    "SCHEMA",
    "WRITE",
    "Execution",
    "InvalidRequest",
    "ThreadingWSGIServer",
    "Verdict",
    "headers_of_record",
    "make_app",
    "process",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS processed_runs (
    run_id        uuid PRIMARY KEY,          -- X-Duetime-Run-Id: one row per run
    fencing_token bigint NOT NULL,           -- X-Duetime-Fencing-Token of the execution it holds
    attempt       integer NOT NULL,          -- X-Duetime-Attempt of that execution
    scheduled_for timestamptz NOT NULL,      -- X-Duetime-Scheduled-For
    body          bytea NOT NULL,            -- the work: here, what the job sent
    written_at    timestamptz NOT NULL DEFAULT now()
)
"""

# Inserts the row, or replaces it only for a higher token. A row this statement leaves alone is
# still locked until the transaction ends (ON CONFLICT DO UPDATE locks the conflicting row even
# when its WHERE is false), so the token read next is the one that won.
WRITE = """
INSERT INTO processed_runs AS p (run_id, fencing_token, attempt, scheduled_for, body)
VALUES (%(run_id)s, %(fencing_token)s, %(attempt)s, %(scheduled_for)s, %(body)s)
ON CONFLICT (run_id) DO UPDATE
    SET fencing_token = EXCLUDED.fencing_token, attempt = EXCLUDED.attempt,
        body = EXCLUDED.body, written_at = now()
    WHERE p.fencing_token < EXCLUDED.fencing_token
RETURNING run_id
"""
_HELD_TOKEN = "SELECT fencing_token FROM processed_runs WHERE run_id = %(run_id)s"


class InvalidRequest(ValueError):
    """A request without duetime's headers, or with values that do not parse (400)."""


class Verdict(enum.Enum):
    """What happened to one execution."""

    APPLIED = "applied"  # its work is what the row holds now
    DUPLICATE = "duplicate"  # the same execution again: already done
    FENCED = "fenced"  # a newer execution already wrote: this one is stale

    @property
    def http_status(self) -> str:
        """2xx tells duetime the run is done; 409 is final, and the zombie it goes to has
        lost its lease anyway (the database rejects its completion)."""
        return "409 Conflict" if self is Verdict.FENCED else "200 OK"


@dataclass(frozen=True)
class Execution:
    """One execution of one run, as duetime's headers describe it."""

    run_id: uuid.UUID
    attempt: int
    fencing_token: int
    scheduled_for: datetime

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Execution:
        """From request headers; names are matched without regard to case."""
        lowered = {name.lower(): value for name, value in headers.items()}
        try:
            return cls(
                run_id=uuid.UUID(lowered["x-duetime-run-id"]),
                attempt=int(lowered["x-duetime-attempt"]),
                fencing_token=int(lowered["x-duetime-fencing-token"]),
                scheduled_for=datetime.fromisoformat(lowered["x-duetime-scheduled-for"]),
            )
        except KeyError as exc:
            raise InvalidRequest(f"missing header {exc.args[0]}") from exc
        except ValueError as exc:
            raise InvalidRequest(f"invalid duetime header: {exc}") from exc


def headers_of_record(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """A Kafka record's headers (UTF-8 values) as the mapping ``Execution.from_headers`` takes."""
    return {name: value.decode("utf-8") for name, value in headers or () if value is not None}


def process(conn: psycopg.Connection[Any], execution: Execution, body: bytes) -> Verdict:
    """Apply one execution in one transaction and say what became of it."""
    params = {
        "run_id": execution.run_id,
        "fencing_token": execution.fencing_token,
        "attempt": execution.attempt,
        "scheduled_for": execution.scheduled_for,
        "body": body,
    }
    with conn.transaction():
        if conn.execute(WRITE, params).fetchone() is not None:
            # This execution won: do the work here, in this transaction.
            return Verdict.APPLIED
        held = conn.execute(_HELD_TOKEN, params).fetchone()
    if held is not None and held[0] == execution.fencing_token:
        return Verdict.DUPLICATE
    return Verdict.FENCED


def make_app(database_url: str) -> WSGIApplication:
    """The target as a WSGI application: any path, any method with a body."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        headers = {
            name[5:].replace("_", "-"): value
            for name, value in environ.items()
            if name.startswith("HTTP_") and isinstance(value, str)
        }
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            execution = Execution.from_headers(headers)
        except InvalidRequest as exc:
            return _answer(start_response, "400 Bad Request", str(exc))
        # One connection per request keeps the example short; use a pool (psycopg_pool) for real.
        with psycopg.connect(database_url) as conn:
            verdict = process(conn, execution, body)
        return _answer(start_response, verdict.http_status, verdict.value)

    return app


def _answer(start_response: StartResponse, status: str, text: str) -> list[bytes]:
    payload = (text + "\n").encode("utf-8")
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(payload)))])
    return [payload]


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per request: a slow request must not hold up the next execution."""

    daemon_threads = True


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    app = make_app(args.database_url)
    with make_server(args.host, args.port, app, server_class=ThreadingWSGIServer) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
