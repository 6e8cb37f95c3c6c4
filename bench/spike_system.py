"""``duetime up`` as a user starts it, under the spike benchmark's control.

The benchmark starts ``duetime up --data-dir DIR`` in its own session, copies its console (the
prefixed service logs) to a file, waits for ``up.ready`` and then for the consumers to join, reads
the URLs from ``DIR/stack.env`` like the CLI does, and at the end stops it with SIGTERM (it then
stops its services and the stack). If that does not finish in time it kills what is left: the
process group of ``up``, the group of every service it reported, and the stack's servers.

The only difference from a user's ``duetime up``: ``DUETIME_ALLOW_PRIVATE_TARGETS=1`` (the HTTP
target listens on 127.0.0.1) and ``--summary-every 0`` (the console's periodic run summary is a
query over the runs table every 10 s that the services do not need).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from duetime.config import Settings, load_settings
from duetime_infra import EmbeddedStack

__all__ = ["DuetimeUp"]

_SERVICE_STARTED = re.compile(r"service\.started name=(\S+) pid=(\d+)")
# Consumer-group joins as the services log them (worker: consumer.assigned, faust dispatcher:
# partitions.assigned). A rebalance logs them again; the system is "joined" once they stop.
_JOINED = re.compile(r"^(worker|dispatcher)\S*\s*\|.*\b(consumer|partitions)\.assigned\b")
_URL_KEYS = ("DUETIME_DATABASE_URL", "DUETIME_KAFKA_BOOTSTRAP", "DUETIME_ETCD_ENDPOINTS")


class DuetimeUp:
    """One ``duetime up`` process and what it printed."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self._lock = threading.Lock()
        self._lines: list[tuple[float, str]] = []
        self._service_pids: dict[str, int] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _URL_KEYS}
        env["DUETIME_ALLOW_PRIVATE_TARGETS"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        script = Path(sys.executable).with_name("duetime")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "duetime.cli.main"]
        self._process = subprocess.Popen(
            [*command, "up", "--data-dir", str(self.data_dir), "--summary-every", "0"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pump = threading.Thread(target=self._read, name="duetime-up-pump", daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        with self.log_path.open("w", encoding="utf-8") as log:
            for raw in iter(self._process.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                log.write(line + "\n")
                found = _SERVICE_STARTED.search(line)
                with self._lock:
                    self._lines.append((time.monotonic(), line))
                    if found:
                        self._service_pids[found.group(1)] = int(found.group(2))

    def _seen(self, pattern: re.Pattern[str]) -> list[float]:
        with self._lock:
            return [at for at, line in self._lines if pattern.search(line)]

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(
                f"duetime up exited with {self._process.returncode}; see {self.log_path}"
            )

    def wait_ready(self, timeout: float) -> None:
        """Wait for ``up.ready``."""
        deadline = time.monotonic() + timeout
        pattern = re.compile(r"\bup\.ready\b")
        while not self._seen(pattern):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"duetime up not ready within {timeout:.0f}s; {self.log_path}")
            time.sleep(0.1)

    def wait_joined(self, quiet: float, timeout: float) -> float:
        """Wait until worker and dispatcher have logged an assignment and then ``quiet`` seconds
        passed without another one (a second worker process makes the group rebalance).

        Returns the seconds waited. Falls back to ``timeout`` when the lines never show up (a
        service that logs differently), which the caller reports.
        """
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            self._check_alive()
            with self._lock:
                joins = [
                    (at, m.group(1)) for at, line in self._lines if (m := _JOINED.search(line))
                ]
            kinds = {kind for _, kind in joins}
            if {"worker", "dispatcher"} <= kinds and time.monotonic() - joins[-1][0] >= quiet:
                return time.monotonic() - started
            time.sleep(0.2)
        return time.monotonic() - started

    def settings(self) -> Settings:
        """The stack's URLs as ``stack.env`` holds them (not this process's environment)."""
        env = {k: v for k, v in os.environ.items() if k not in _URL_KEYS}
        env["DUETIME_DATA_DIR"] = str(self.data_dir)
        return load_settings(self.data_dir, env)

    def count_lines(self, pattern: str) -> int:
        return len(self._seen(re.compile(pattern)))

    def stop(self, timeout: float = 90.0) -> bool:
        """SIGTERM to ``up`` and wait; kill everything left if that fails. True if it was clean.

        SIGTERM rather than SIGINT: a process started from a non-interactive shell's background
        job inherits SIGINT ignored, and ``up`` handles SIGTERM like Ctrl-C. Only ``up`` itself
        gets it; it stops its services and the stack in order.
        """
        process = self._process
        if process is None:
            return True
        clean = True
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                clean = False
        if not clean or process.returncode != 0:
            clean = False
            self._kill_everything()
        if self._pump is not None:
            self._pump.join(5)
        return clean

    def _kill_everything(self) -> None:
        process = self._process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        with self._lock:
            pids = list(self._service_pids.values())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            EmbeddedStack(self.data_dir).down()
