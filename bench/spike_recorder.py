"""What the spike benchmark's recorders observe, and the parent's handle on a recorder process.

A recorder (the HTTP target, or the consumer of a Kafka target topic) runs in its own process and
records one :class:`Arrival` per handler start. The parent starts it with :class:`Recorder`,
follows its progress through ``count N`` lines on its stdout, and on :meth:`Recorder.stop` gets
every arrival back through a file (one tab-separated line each).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

__all__ = [
    "Arrival",
    "Recorder",
    "parse_instant",
    "print_line",
    "read_arrivals",
    "write_arrivals",
]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One handler start, as the target saw it. Instants are Unix epoch seconds."""

    run_id: str
    attempt: int
    scheduled_for: float
    arrived_at: float
    # Kafka targets: the record's CreateTime (when its producer sent it), else None.
    created_at: float | None


def parse_instant(text: str) -> float:
    """``X-Duetime-Scheduled-For`` (ISO-8601 with ``Z`` or an offset) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def write_arrivals(path: Path, arrivals: Sequence[Arrival]) -> None:
    with path.open("w", encoding="ascii") as out:
        for a in arrivals:
            created = "" if a.created_at is None else f"{a.created_at:.6f}"
            out.write(
                f"{a.run_id}\t{a.attempt}\t{a.scheduled_for:.6f}\t{a.arrived_at:.6f}\t{created}\n"
            )


def read_arrivals(path: Path) -> list[Arrival]:
    """Read OUT back. The scheduled_for column is epoch seconds or the header's ISO-8601 text
    (the Kafka recorder writes the header as it came, to keep its hot loop cheap)."""
    arrivals: list[Arrival] = []
    instants: dict[str, float] = {}  # runs share few distinct scheduled_for values
    with path.open(encoding="ascii") as source:
        for line in source:
            run_id, attempt, scheduled, arrived, created = line.rstrip("\n").split("\t")
            instant = instants.get(scheduled)
            if instant is None:
                instant = parse_instant(scheduled) if "T" in scheduled else float(scheduled)
                instants[scheduled] = instant
            arrivals.append(
                Arrival(
                    run_id,
                    int(attempt),
                    instant,
                    float(arrived),
                    float(created) if created else None,
                )
            )
    return arrivals


class Recorder:
    """A recorder child process: started, watched through its stdout, stopped for its data."""

    def __init__(self, name: str, argv: Sequence[str], out: Path, log: Path) -> None:
        self.name = name
        self.out = out
        self.count = 0
        self.port: int | None = None
        self.ready = threading.Event()
        self._done = threading.Event()
        self._log = log.open("w", encoding="utf-8")
        self._process = subprocess.Popen(
            [sys.executable, "-m", *argv, str(out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        self._pump = threading.Thread(target=self._read, name=f"{name}-pump", daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for raw in iter(self._process.stdout.readline, b""):
            word, _, value = raw.decode("utf-8", "replace").strip().partition(" ")
            if word == "port":
                self.port = int(value)
                self.ready.set()
            elif word == "ready":
                self.ready.set()
            elif word == "count":
                self.count = int(value)
            elif word == "done":
                self._done.set()

    def wait_ready(self, timeout: float) -> None:
        if not self.ready.wait(timeout):
            raise RuntimeError(f"{self.name} recorder not ready within {timeout:.0f}s")

    def wait_count(self, expected: int, deadline: float) -> bool:
        """Block until ``expected`` handler starts were recorded or ``deadline`` (epoch s)."""
        while time.time() < deadline:
            if self.count >= expected:
                return True
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.name} recorder exited ({self._process.returncode})")
            time.sleep(0.05)
        return self.count >= expected

    def wait_quiet(self, quiet: float, deadline: float) -> None:
        """Block until no new handler start arrived for ``quiet`` seconds, or ``deadline``."""
        last, since = self.count, time.monotonic()
        while time.time() < deadline and time.monotonic() - since < quiet:
            time.sleep(0.1)
            if self.count != last:
                last, since = self.count, time.monotonic()

    def stop(self, timeout: float = 120.0) -> list[Arrival]:
        """Ask the recorder to write its arrivals, wait for it, and read them back."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(b"stop\n")
            self._process.stdin.close()
        except BrokenPipeError:
            pass
        self._process.wait(timeout)
        self._pump.join(5)
        self._log.close()
        if self._process.returncode != 0:
            raise RuntimeError(f"{self.name} recorder failed ({self._process.returncode})")
        return read_arrivals(self.out)

    def kill(self) -> None:
        """Make sure the process is gone (after a failure)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        if not self._log.closed:
            self._log.close()
