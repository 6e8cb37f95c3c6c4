"""Run the services as child processes with prefixed logs; restart one that dies; stop them all.

Each child runs ``python -m duetime.cli.main service NAME`` in its own process group, so a Ctrl-C
in the terminal reaches only the supervisor, which then stops the children in order (SIGTERM, a
grace period, SIGKILL) and leaves no process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

__all__ = ["ServiceSpec", "Supervisor"]

_COLORS = ("36", "35", "33", "32", "34", "31")


@dataclass
class ServiceSpec:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    pumps: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    """Starts, watches and stops a set of services."""

    def __init__(self, out: IO[str] | None = None, max_restarts: int = 5) -> None:
        self.out = out or sys.stdout
        self.max_restarts = max_restarts
        self.services: list[ServiceSpec] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._width = 10

    def say(self, source: str, line: str) -> None:
        index = sum(map(ord, source)) % len(_COLORS)
        prefix = f"{source:<{self._width}}|"
        if self.out.isatty():
            prefix = f"\033[{_COLORS[index]}m{prefix}\033[0m"
        with self._lock:
            self.out.write(f"{prefix} {line}\n")
            self.out.flush()

    def add(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.services.append(ServiceSpec(name, list(argv), dict(env)))
        self._width = max(self._width, len(name))

    def start_all(self) -> None:
        for spec in self.services:
            self._start(spec)

    def _start(self, spec: ServiceSpec) -> None:
        spec.process = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: terminal signals reach us only
        )
        spec.started_at = time.monotonic()
        pump = threading.Thread(target=self._pump, args=(spec, spec.process), daemon=True)
        pump.start()
        spec.pumps.append(pump)
        self.say("duetime", f"service.started name={spec.name} pid={spec.process.pid}")

    def _pump(self, spec: ServiceSpec, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            self.say(spec.name, raw.decode("utf-8", "replace").rstrip())

    def check(self) -> list[str]:
        """Report (and restart, with a budget) services that exited; returns their names."""
        died: list[str] = []
        for spec in self.services:
            process = spec.process
            if process is None or process.poll() is None or self._stopping:
                continue
            died.append(spec.name)
            self.say("duetime", f"service.exited name={spec.name} code={process.returncode}")
            # A service that ran a while before dying gets its restart budget back.
            if time.monotonic() - spec.started_at > 60:
                spec.restarts = 0
            if spec.restarts < self.max_restarts:
                spec.restarts += 1
                time.sleep(min(2.0 * spec.restarts, 10.0))
                self._start(spec)
            else:
                self.say("duetime", f"service.gave_up name={spec.name} restarts={spec.restarts}")
                spec.process = None
        return died

    def stop_all(self, grace: float = 10.0) -> None:
        self._stopping = True
        alive = [s for s in self.services if s.process and s.process.poll() is None]
        for spec in alive:
            assert spec.process is not None
            self._signal(spec.process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for spec in alive:
            assert spec.process is not None
            try:
                spec.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("duetime", f"service.killed name={spec.name} pid={spec.process.pid}")
                self._signal(spec.process, signal.SIGKILL)
                spec.process.wait(5)
        for spec in self.services:
            for pump in spec.pumps:
                pump.join(1.0)
            if spec.process is not None:
                self.say(
                    "duetime", f"service.stopped name={spec.name} code={spec.process.returncode}"
                )

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        # The child leads its own group: signal the group, so anything it spawned goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
