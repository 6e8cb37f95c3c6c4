"""All four services as real processes on the test stack; one database and topic prefix each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from duetime.cli.supervisor import SUPERVISOR_PID_ENV
from duetime.config import Settings
from duetime.jobdef import parse_jobs
from duetime.lifetime import parent_death_preexec
from duetime.store import Store
from duetime.store.jobs import jobs_apply

T = TypeVar("T")
SERVICE_ARGS = {
    "planner": ["--lookahead", "5", "--tick", "0.2"],
    "dispatcher": [],
    "worker": [],
    "reaper": ["--tick", "0.2"],
}


class Pipeline:
    def __init__(self, database_url: str, kafka_bootstrap: str, log_dir: Path) -> None:
        self.prefix = f"t{uuid.uuid4().hex[:8]}."
        self.settings = Settings(
            database_url=database_url, kafka_bootstrap=kafka_bootstrap, topic_prefix=self.prefix
        )
        self.env = {
            **os.environ,
            "DUETIME_DATABASE_URL": database_url,
            "DUETIME_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "DUETIME_TOPIC_PREFIX": self.prefix,
            "DUETIME_ALLOW_PRIVATE_TARGETS": "1",
            "DUETIME_DATA_DIR": str(log_dir / "data"),
            "PYTHONUNBUFFERED": "1",
        }
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.store = Store(database_url, pool_size=2, application_name="duetime-test")

    def start(
        self,
        name: str,
        *,
        instance: str | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> subprocess.Popen[bytes]:
        """Start service ``name``; ``instance`` names a second copy (its key and log file);
        ``env`` adds variables for this service alone (its metrics port); ``args`` come after
        the usual ones, so they win."""
        key = instance or name
        log = (self.log_dir / f"{key}.log").open("ab")
        # Supervised by the test process as duetime up supervises them: they stop when it dies,
        # so a test session that is killed leaves no service behind.
        process = subprocess.Popen(
            [sys.executable, "-m", "duetime.cli.main", "service", name, *SERVICE_ARGS[name], *args],
            env={**self.env, **(env or {}), SUPERVISOR_PID_ENV: str(os.getpid())},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=parent_death_preexec(signal.SIGTERM),
        )
        self.processes[key] = process
        return process

    def start_all(self) -> None:
        for name in SERVICE_ARGS:
            self.start(name)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def pause(self, name: str) -> None:
        """``kill -STOP`` the service's process group (a GC or VM stall); ``resume`` undoes it."""
        os.killpg(self.processes[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.processes[name].pid, signal.SIGCONT)

    def log_text(self, name: str) -> str:
        """The whole log of one service instance ('' before it wrote anything)."""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                # A stopped (paused) process would never act on SIGTERM: continue it first.
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGTERM)
        for name, process in list(self.processes.items()):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
            self.processes.pop(name)
        self.store.close()

    def apply(self, jobs: list[dict[str, Any]]) -> None:
        with self.store.tx() as tx:
            jobs_apply(tx, parse_jobs(jobs))

    def sql(self, statement: str, **params: Any) -> list[Any]:
        from sqlalchemy import text

        with self.store.engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n" + p.read_text(errors="replace")[-6000:]
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def wait_until(self, what: str, probe: Callable[[], T | None], timeout: float) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"{name} exited with {process.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.2)


@pytest.fixture
def pipeline(database_url: str, stack: Any, tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(database_url, stack.kafka_bootstrap, tmp_path)
    p.start_all()
    try:
        yield p
    finally:
        p.stop_all()


TERMINAL = ("succeeded", "dead", "cancelled", "skipped")


def e2e_job(job_id: str, url: str, **extra: Any) -> dict[str, Any]:
    """A job definition for these tests: every 2 s to ``url``, overridable field by field."""
    job: dict[str, Any] = {
        "id": job_id,
        "tenant": "e2e",
        "schedule": {"interval": "PT2S"},
        "target": {"http": {"url": url, "timeout_seconds": 10}},
        "target_service": "e2e-target",
    }
    job.update(extra)
    return job
