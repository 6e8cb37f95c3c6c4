"""The lifecycle every embedded server shares: spawn, wait until healthy, stop, kill, restart.

A component owns one port (chosen when the object is made, kept for its lifetime), so a test can
``kill()`` a server to simulate a crash and ``start()`` it again on the same address: clients
configured with the old URL reconnect by themselves. Subclasses say how to run the server, how
to probe it, and how it wants to be stopped.
"""

from __future__ import annotations

import abc
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from duetime.errors import StackError
from duetime.logs import event
from duetime_infra.ports import find_free_port, port_accepts, port_is_free
from duetime_infra.processes import (
    OsUser,
    ProcessRecord,
    is_running,
    kill_tree,
    spawn,
    stop_process,
)

__all__ = ["DEFAULT_START_TIMEOUT", "Component"]

DEFAULT_START_TIMEOUT = 30.0
_LOG_TAIL_LINES = 20

_logger = logging.getLogger(__name__)


class Component(abc.ABC):
    """One server process of the embedded stack, identified by pid and start time."""

    #: The component's name in ``stack.json``, logs and events (``logs/<name>.log``); a class
    #: attribute, set per object where a stack runs several of a kind (``postgres-2``).
    name: str
    #: Signals sent in order with the grace period after each; SIGKILL follows if all are ignored.
    stop_steps: ClassVar[tuple[tuple[signal.Signals, float], ...]] = ((signal.SIGTERM, 10.0),)
    #: What the kernel sends the server when its owner dies (``die_with_owner``): the signal
    #: that stops it fastest without leaving its data needing repair.
    parent_death_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        on_change: Callable[[Component], None] | None = None,
        die_with_owner: bool = False,
    ) -> None:
        """Args:
        data_dir: the stack's directory; the component keeps its files in a subdirectory.
        port: the loopback port to listen on; a free one is picked if None.
        env: environment for the server process (default ``os.environ``).
        on_change: called after the process starts or stops, so the owner can persist it.
        die_with_owner: the kernel stops the server (``parent_death_signal``) when the thread
            that started it exits, however its process ends (Linux; ``duetime.lifetime``).
        """
        self.data_dir = Path(data_dir).absolute()
        self.port = port if port is not None else find_free_port()
        self._env = dict(os.environ if env is None else env)
        self._on_change = on_change
        self._die_with_owner = die_with_owner
        self._record: ProcessRecord | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    # What subclasses define -------------------------------------------------------------

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The address clients use, in the form stack.env carries it."""

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The command line that runs the server in the foreground."""

    @abc.abstractmethod
    def probe(self, timeout: float = 2.0) -> bool:
        """A real protocol round trip against the server (not just an open port)."""

    def aux_ports(self) -> dict[str, int]:
        """Ports other than ``port`` that the server binds (persisted for reuse)."""
        return {}

    def _prepare(self) -> None:
        """Create directories or data the server needs before it starts."""
        return None

    def _process_env(self) -> dict[str, str]:
        return dict(self._env)

    def _run_as(self) -> OsUser | None:
        return None

    def _cwd(self) -> Path | None:
        return None

    def _after_ready(self) -> None:
        """Runs once the probe passes after a start (e.g. create the database)."""
        return None

    # Shared lifecycle ------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.data_dir / "logs" / f"{self.name}.log"

    @property
    def record(self) -> ProcessRecord | None:
        """The process this object started or adopted, if it is still running."""
        return self._record if self.running() else None

    @property
    def pid(self) -> int | None:
        record = self.record
        return None if record is None else record.pid

    def adopt(self, record: ProcessRecord) -> None:
        """Take over a process started by another ``EmbeddedStack`` (e.g. another CLI run)."""
        if self._record is not None and self._record.pid == record.pid:
            return  # the same process; keep our Popen handle so it can be reaped
        self._record = record
        self._popen = None

    def running(self) -> bool:
        if self._record is None:
            return False
        if self._popen is not None and self._popen.pid == self._record.pid:
            self._popen.poll()  # reap it if it died, so /proc shows it gone
        return is_running(self._record)

    def healthy(self) -> bool:
        return self.running() and self.probe()

    def spawn(self) -> None:
        """Start the process without waiting for it to become healthy."""
        if self.running():
            return
        if not port_is_free(self.port):
            raise StackError(f"{self.name}: port 127.0.0.1:{self.port} is already in use")
        self._prepare()
        argv = self.argv()
        self._popen, self._record = spawn(
            argv,
            log_path=self.log_path,
            env=self._process_env(),
            cwd=self._cwd(),
            user=self._run_as(),
            parent_death_signal=self.parent_death_signal if self._die_with_owner else None,
        )
        event(
            _logger,
            "stack.component_spawned",
            component=self.name,
            pid=self._record.pid,
            port=self.port,
        )
        self._changed()

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Block until the probe passes; raise StackError (with the log tail) if it never does."""
        started = time.monotonic()
        deadline = started + timeout
        delay = 0.02
        while True:
            if not self.running():
                code = None if self._popen is None else self._popen.poll()
                raise StackError(
                    f"{self.name} exited during start-up (exit status {code}){self._log_tail()}"
                )
            if port_accepts(self.port) and self.probe(timeout=2.0):
                break
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{self.name} not healthy after {timeout:.0f} s on port {self.port}"
                    f"{self._log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        self._after_ready()
        event(
            _logger,
            "stack.component_healthy",
            component=self.name,
            pid=self.pid,
            url=self.url,
            elapsed_s=f"{time.monotonic() - started:.2f}",
        )

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start the server (no-op if it already runs) and wait until it is healthy."""
        self.spawn()
        self.wait_healthy(timeout)

    def stop(self) -> None:
        """Stop the server gracefully, escalating to SIGKILL; no-op if it is not running."""
        record = self._record
        if record is None or not self.running():
            self._forget()
            return
        killed = stop_process(record, self.stop_steps, self._popen)
        event(
            _logger,
            "stack.component_stopped",
            component=self.name,
            pid=record.pid,
            forced=killed,
        )
        self._forget()

    def kill(self) -> None:
        """SIGKILL the server and its children, as a crash would; ``start()`` brings it back."""
        record = self._record
        if record is not None and kill_tree(record, self._popen):
            event(_logger, "stack.component_killed", component=self.name, pid=record.pid)
        self._forget()

    def _forget(self) -> None:
        had_record = self._record is not None
        self._record = None
        self._popen = None
        if had_record:
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        tail = "\n".join(lines[-_LOG_TAIL_LINES:])
        return f"; last lines of {self.log_path}:\n{tail}"
