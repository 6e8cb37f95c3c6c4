"""``<data dir>/up.json`` and ``up.lock``: which ``duetime up`` owns a data dir, what it started.

``duetime up`` holds ``up.lock`` (``flock``) for as long as it runs, and the kernel releases the
lock when the process ends, however it ends. So a second ``up`` on the same directory knows for
certain whether the first is alive: while the lock is held it refuses to start; once it is free,
an ``up.json`` left behind belongs to a run that died without cleaning up (SIGKILL, a crash, a
power cut), and what it names is stale. Its services are stopped (each matched by pid *and*
start time, so a process that reused a pid is never signalled) and, if that run had started the
stack, the caller stops the stack too, so the new run starts from a state it owns.

The file is rewritten whenever a service starts or restarts, and removed by a clean exit.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from duetime.errors import StackError
from duetime_infra.processes import (
    ProcessRecord,
    is_running,
    kill_tree,
    send_signal,
    wait_exit,
)

__all__ = ["RECORD_FILE", "UpClaim", "UpRecord", "stop_services"]

RECORD_FILE = "up.json"
_LOCK_FILE = "up.lock"


@dataclass(frozen=True)
class UpRecord:
    """What one ``duetime up`` run started: its services, and whether it started the stack."""

    supervisor_pid: int
    owns_stack: bool
    services: Mapping[str, ProcessRecord] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "supervisor_pid": self.supervisor_pid,
            "owns_stack": self.owns_stack,
            "services": {name: record.to_json() for name, record in self.services.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpRecord:
        return cls(
            supervisor_pid=int(data["supervisor_pid"]),
            owns_stack=bool(data["owns_stack"]),
            services={
                str(name): ProcessRecord.from_json(record)
                for name, record in dict(data.get("services") or {}).items()
            },
        )


class UpClaim:
    """This process's hold on a data dir, from ``acquire`` until ``release`` or its death."""

    def __init__(self, data_dir: Path, lock: IO[str], previous: UpRecord | None) -> None:
        self.path = data_dir / RECORD_FILE
        self._lock = lock
        #: What a run that died without cleaning up left in ``up.json``, if anything.
        self.previous = previous

    @classmethod
    def acquire(cls, data_dir: Path) -> UpClaim:
        """Take the data dir, or raise StackError naming the ``duetime up`` that holds it."""
        data_dir.mkdir(parents=True, exist_ok=True)
        # Opened close-on-exec (Python's default): a child must not keep the lock alive.
        lock = (data_dir / _LOCK_FILE).open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            holder = _read(data_dir / RECORD_FILE)
            who = "" if holder is None else f" (pid {holder.supervisor_pid})"
            raise StackError(
                f"another duetime up{who} is running on {data_dir}; stop it first"
            ) from None
        return cls(data_dir, lock, _read(data_dir / RECORD_FILE))

    def save(self, owns_stack: bool, services: Mapping[str, ProcessRecord]) -> None:
        record = UpRecord(os.getpid(), owns_stack, dict(services))
        tmp = self.path.with_suffix(f".json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    def release(self) -> None:
        """A clean exit: nothing this run started is left, so nothing is recorded."""
        self.path.unlink(missing_ok=True)
        self._lock.close()  # closing the descriptor drops the flock


def _read(path: Path) -> UpRecord | None:
    try:
        return UpRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        # Cut short mid-write by a crash: the services it named can no longer be found by pid.
        # They stop by themselves once their supervisor is gone (duetime.lifetime).
        return None


def stop_services(records: Mapping[str, ProcessRecord], grace: float) -> list[str]:
    """Stop the recorded services that still run: SIGTERM to all, then SIGKILL after ``grace``.

    Returns the names of those that were still running. A service leads its own process group
    (worker processes are in it), so the final kill takes the whole group.
    """
    alive = {name: record for name, record in records.items() if is_running(record)}
    for record in alive.values():
        send_signal(record, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for record in alive.values():
        if not wait_exit(record, max(0.0, deadline - time.monotonic())):
            kill_tree(record)
    return sorted(alive)
