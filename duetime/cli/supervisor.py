"""Run the services as child processes with prefixed logs; restart one that dies; stop them all.

Each child runs ``python -m duetime.cli.main service NAME`` in its own process group, so a Ctrl-C
in the terminal reaches only the supervisor, which then stops the children in order (SIGTERM, a
grace period, SIGKILL) and leaves no process behind.

When the supervisor itself dies without stopping them (SIGKILL, a crash), the children stop by
themselves: the kernel sends each SIGTERM (``PR_SET_PDEATHSIG``, Linux), and ``duetime service``
watches the pid in ``DUETIME_SUPERVISOR_PID`` and kills its own process group ``STOP_GRACE``
seconds later if the clean stop hangs (``duetime.lifetime``). Services are started from the
thread that calls ``start_all`` and ``check``, which must be the main thread: the kernel signal
follows the thread that started a child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from duetime.lifetime import parent_death_preexec

__all__ = ["STOP_GRACE", "SUPERVISOR_PID_ENV", "ServiceSpec", "Supervisor"]

#: Seconds a service gets to stop after SIGTERM before it is killed, by the supervisor or, when
#: the supervisor is gone, by itself.
STOP_GRACE = 10.0
#: Tells a service which process supervises it, so it can stop when that process dies.
SUPERVISOR_PID_ENV = "DUETIME_SUPERVISOR_PID"

_COLORS = ("36", "35", "33", "32", "34", "31")


@dataclass
class ServiceSpec:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    restart_at: float | None = None  # monotonic time of a pending restart
    pumps: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    """Starts, watches and stops a set of services."""

    def __init__(
        self,
        out: IO[str] | None = None,
        max_restarts: int = 5,
        on_started: Callable[[ServiceSpec], None] | None = None,
        on_line: Callable[[str, str], None] | None = None,
    ) -> None:
        """Args:
        out: where the prefixed lines go (default stdout).
        max_restarts: restarts in a row before a service that keeps dying is given up.
        on_started: called after each start or restart of a service (to record its pid).
        on_line: called with (service name, line) for every line a service prints, on the
            thread reading that service's output (to notice a service's progress).
        """
        self.out = out or sys.stdout
        self.max_restarts = max_restarts
        self.services: list[ServiceSpec] = []
        self._on_started = on_started
        self._on_line = on_line
        self._lock = threading.Lock()
        self._stopping = False
        self._width = 10
        try:
            self._color = self.out.isatty()
        except ValueError:  # already closed
            self._color = False

    def say(self, source: str, line: str) -> None:
        index = sum(map(ord, source)) % len(_COLORS)
        prefix = f"{source:<{self._width}}|"
        if self._color:
            prefix = f"\033[{_COLORS[index]}m{prefix}\033[0m"
        with self._lock:
            try:
                self.out.write(f"{prefix} {line}\n")
                self.out.flush()
            except (OSError, ValueError):
                # The terminal or the pipe reading us is gone (a closed window, `make up | tee`
                # stopped by the same signal): the services must still be drained and stopped.
                pass

    def add(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.services.append(ServiceSpec(name, list(argv), dict(env)))
        self._width = max(self._width, len(name))

    def start_all(self) -> None:
        for spec in self.services:
            self._start(spec)

    def _start(self, spec: ServiceSpec) -> None:
        spec.process = subprocess.Popen(
            list(spec.argv),
            env={**spec.env, SUPERVISOR_PID_ENV: str(os.getpid())},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: terminal signals reach us only
            preexec_fn=parent_death_preexec(signal.SIGTERM),
        )
        spec.started_at = time.monotonic()
        pump = threading.Thread(target=self._pump, args=(spec, spec.process), daemon=True)
        pump.start()
        spec.pumps.append(pump)
        self.say("duetime", f"service.started name={spec.name} pid={spec.process.pid}")
        if self._on_started is not None:
            self._on_started(spec)

    def _pump(self, spec: ServiceSpec, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            self.say(spec.name, line)
            if self._on_line is not None:
                self._on_line(spec.name, line)

    def check(self) -> list[str]:
        """Report services that exited and restart them after a back-off; never blocks.

        Returns the names of those found dead. A service gets ``max_restarts`` restarts in a
        row (2, 4, ... 10 s apart); one that ran a minute before dying gets its budget back.
        """
        died: list[str] = []
        now = time.monotonic()
        for spec in self.services:
            if self._stopping:
                break
            process = spec.process
            if process is None:
                if spec.restart_at is not None and now >= spec.restart_at:
                    spec.restart_at = None
                    self._start(spec)
                continue
            if process.poll() is None:
                continue
            died.append(spec.name)
            self.say("duetime", f"service.exited name={spec.name} code={process.returncode}")
            spec.process = None
            if now - spec.started_at > 60:
                spec.restarts = 0
            if spec.restarts < self.max_restarts:
                spec.restarts += 1
                spec.restart_at = now + min(2.0 * spec.restarts, 10.0)
            else:
                self.say("duetime", f"service.gave_up name={spec.name} restarts={spec.restarts}")
        return died

    def stop_all(self, grace: float = STOP_GRACE) -> None:
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
