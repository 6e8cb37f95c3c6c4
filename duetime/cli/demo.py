"""The demo workload of ``duetime up --demo``: a local HTTP target and three jobs.

- ``demo-every-5s``: an interval job that succeeds (PT5S).
- ``demo-kolkata-cron``: a cron job every minute in Asia/Kolkata.
- ``demo-always-fails``: a job whose target answers 500, so its runs go to ``dead`` after three
  attempts (with backoff) and raise the dead-run alert.
- ``demo-slow-3s``: a job whose target takes 3 s to answer, so its attempts hold leases that
  the worker renews and announces on ``runs.heartbeats``, where the reaper watches them.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from duetime.jobdef import parse_jobs
from duetime.model import JobDefinition
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import JobWrite, jobs_apply_clusters

__all__ = ["DemoTarget", "PipelineJoined", "demo_jobs", "demo_jobs_apply"]

_SLOW_ANSWER = 3.0  # seconds ``/slow`` takes to answer
#: What a service prints once it consumes: the dispatcher once it has joined its group, a
#: worker process once it is given partitions of runs.ready.
_CONSUMING = {"dispatcher": "dispatcher.started", "worker": "consumer.assigned"}


class PipelineJoined:
    """Tells from the services' output when a dispatcher and a worker consume.

    ``duetime up --demo`` applies the demo jobs only then: their first runs are due at once,
    and runs due while the consumers were still joining their groups (a few seconds after
    start) were released that late, which fired the release-lateness alert in the demo's
    first minute. ``observe`` is the supervisor's ``on_line`` (called on its reading threads).
    """

    def __init__(self) -> None:
        self.ready = threading.Event()
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def observe(self, service: str, line: str) -> None:
        if self.ready.is_set():
            return
        kind = service.split("-", 1)[0]  # "dispatcher-1" is a dispatcher too
        marker = _CONSUMING.get(kind)
        if marker is None or marker not in line:
            return
        with self._lock:
            self._seen.add(kind)
            if self._seen == _CONSUMING.keys():
                self.ready.set()


class DemoTarget:
    """A recording HTTP target on 127.0.0.1: ``/ok`` answers 200, ``/fail`` answers 500,
    ``/slow`` answers 200 after 3 s."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        target = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with target._lock:
                    target.requests.append(
                        {
                            "path": self.path,
                            "idempotency_key": self.headers.get("Idempotency-Key"),
                            "at": datetime.now(UTC),
                        }
                    )
                status = 500 if self.path.startswith("/fail") else 200
                if self.path.startswith("/slow"):
                    time.sleep(_SLOW_ANSWER)
                body = json.dumps({"ok": status == 200}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET = do_PUT = _handle

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = _DemoServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _DemoServer(ThreadingHTTPServer):
    """A listen backlog for the workers' many connections (socketserver's default is 5: the
    overflow is dropped SYNs, whose retries arrive seconds later as slow requests)."""

    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller that hung up before the answer (a worker stopping hands its slow run back
        and closes the connection) is normal here, not a traceback on the console."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def demo_jobs(port: int) -> list[JobDefinition]:
    base = f"http://127.0.0.1:{port}"
    return parse_jobs(
        {
            "jobs": [
                {
                    "id": "demo-every-5s",
                    "tenant": "demo",
                    "schedule": {"interval": "PT5S"},
                    "target": {
                        "http": {"url": f"{base}/ok/every-5s", "body": {"hello": "duetime"}}
                    },
                    "target_service": "demo-target",
                },
                {
                    "id": "demo-kolkata-cron",
                    "tenant": "demo",
                    "schedule": {"cron": "* * * * *", "time_zone": "Asia/Kolkata"},
                    "target": {"http": {"url": f"{base}/ok/kolkata", "method": "POST"}},
                    "target_service": "demo-target",
                },
                {
                    "id": "demo-always-fails",
                    "tenant": "demo",
                    "schedule": {"interval": "PT20S"},
                    "target": {"http": {"url": f"{base}/fail", "timeout_seconds": 5}},
                    "target_service": "demo-target",
                    "retry": {"max_attempts": 3, "initial_interval_seconds": 1, "multiplier": 2},
                    "lease_seconds": 10,
                    "heartbeat_seconds": 3,
                },
                {
                    "id": "demo-slow-3s",
                    "tenant": "demo",
                    "schedule": {"interval": "PT15S"},
                    "target": {"http": {"url": f"{base}/slow/3s", "timeout_seconds": 10}},
                    "target_service": "demo-target",
                    "lease_seconds": 10,
                    "heartbeat_seconds": 2,
                },
            ]
        }
    )


def demo_jobs_apply(clusters: ClusterStores, port: int) -> list[JobWrite]:
    """The demo jobs (target on ``port``) written, each to its shard's cluster."""
    return jobs_apply_clusters(clusters, demo_jobs(port))
