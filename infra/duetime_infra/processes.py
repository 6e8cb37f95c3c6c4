"""Start server processes and stop them again by pid, without ever signalling a stranger.

A pid in ``stack.json`` may outlive its process: after a crash or a reboot the kernel can hand the
same number to an unrelated program. So a process is identified by its pid **and** its start time
(``/proc/<pid>/stat`` field 22, in clock ticks since boot) and the name of its executable; only a
process that matches all three is signalled. Each server runs in its own session (``setsid``), so
its pid is also its process-group id and a hard kill takes its children (PostgreSQL backends)
along.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from duetime.lifetime import parent_death_preexec

__all__ = [
    "OsUser",
    "ProcessRecord",
    "child_record",
    "children_of",
    "is_running",
    "kill_tree",
    "processes_in_dir",
    "program_names",
    "send_signal",
    "spawn",
    "stop_process",
    "wait_exit",
]

_PROC = Path("/proc")


@dataclass(frozen=True)
class OsUser:
    """An unprivileged account a server is run as (PostgreSQL refuses to run as root)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class ProcessRecord:
    """What identifies one server process; persisted in ``stack.json``."""

    pid: int
    # None where /proc is missing (not Linux): then only the pid is checked.
    start_ticks: int | None
    argv: tuple[str, ...]
    started_at: str  # ISO-8601 UTC, for people reading stack.json

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "argv": list(self.argv),
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        ticks = data.get("start_ticks")
        return cls(
            pid=int(data["pid"]),
            start_ticks=None if ticks is None else int(ticks),
            argv=tuple(str(part) for part in data.get("argv", ())),
            started_at=str(data.get("started_at", "")),
        )


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state, ppid, pgrp, ...), or None if it is gone."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def _read_stat(pid: int) -> tuple[str, int] | None:
    """Return (state, start ticks) of ``pid``, or None if there is no such process."""
    fields = _stat_fields(pid)
    return None if fields is None else (fields[0], int(fields[19]))


def _threads_left(pid: int) -> bool:
    """Whether a zombie thread-group leader still has threads exiting.

    A multi-threaded server (etcd, tansu) killed by SIGKILL shows its main thread as a zombie
    while other threads are still tearing down and still hold its sockets open; it is not gone
    until they are.
    """
    try:
        return sum(1 for _ in (_PROC / str(pid) / "task").iterdir()) > 1
    except OSError:
        return False


def _snapshot(pid: int) -> ProcessRecord | None:
    fields = _stat_fields(pid)
    argv0 = _read_argv0(pid)
    if fields is None or argv0 is None or fields[0] in ("Z", "X"):
        return None
    return ProcessRecord(pid=pid, start_ticks=int(fields[19]), argv=(argv0,), started_at="")


def _all_pids() -> list[int]:
    if not _PROC.is_dir():
        return []
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def children_of(pid: int) -> list[ProcessRecord]:
    """Live direct children of ``pid``.

    PostgreSQL's children each call ``setsid()``, so a signal to the postmaster's process
    group does not reach them; they have to be found by parent pid.
    """
    found = []
    for candidate in _all_pids():
        fields = _stat_fields(candidate)
        if fields is not None and int(fields[1]) == pid:
            record = _snapshot(candidate)
            if record is not None:
                found.append(record)
    return found


def processes_in_dir(path: Path) -> list[ProcessRecord]:
    """Live processes whose working directory is ``path`` (leftover PostgreSQL backends)."""
    target = str(path.resolve())
    found = []
    for candidate in _all_pids():
        try:
            cwd = str((_PROC / str(candidate) / "cwd").readlink())
        except OSError:
            continue
        if cwd == target:
            record = _snapshot(candidate)
            if record is not None:
                found.append(record)
    return found


def _read_argv0(pid: int) -> str | None:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") or None


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    user: OsUser | None = None,
    parent_death_signal: signal.Signals | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` detached from our terminal, output appended to ``log_path``.

    The server gets its own session so it outlives a ``duetime stack up`` that exits right after,
    and a Ctrl-C in the shell does not reach it. With ``parent_death_signal`` the kernel sends
    it that signal when the calling thread exits (Linux; see ``duetime.lifetime``), for a server
    that must not outlive the process that started it, however that process ends.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        log.write(f"--- {stamp} starting: {' '.join(argv)}\n".encode())
        log.flush()
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            user=None if user is None else user.uid,
            group=None if user is None else user.gid,
            extra_groups=None if user is None else [],
            preexec_fn=(
                None if parent_death_signal is None else parent_death_preexec(parent_death_signal)
            ),
        )
    return popen, child_record(popen.pid, argv)


def child_record(pid: int, argv: Sequence[str]) -> ProcessRecord:
    """The record of a child we just started with ``argv``, to find it again by pid."""
    stat = _read_stat(pid)
    return ProcessRecord(
        pid=pid,
        start_ticks=None if stat is None else stat[1],
        argv=tuple(argv),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def is_running(record: ProcessRecord) -> bool:
    """Whether the process ``record`` describes is alive, and is still that same process."""
    if not _PROC.is_dir():
        try:
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    stat = _read_stat(record.pid)
    if stat is None:
        return False
    state, ticks = stat
    if state in ("Z", "X") and not _threads_left(record.pid):
        return False  # exited, only the pid entry is left
    if record.start_ticks is not None and ticks != record.start_ticks:
        return False  # the pid was reused
    argv0 = _read_argv0(record.pid)
    if argv0 is None:
        # The command line reads empty for a moment while exec() loads the program, right
        # after Popen returns; the start time already proved it is our process.
        return record.start_ticks is not None
    return bool(record.argv) and bool(program_names(argv0) & program_names(record.argv[0]))


def program_names(argv0: str) -> set[str]:
    """Names ``argv0`` may stand for: the executable's file name, or the prefix of a title.

    PostgreSQL backends overwrite their command line with a title such as
    ``postgres: checkpointer`` that changes as they work; its stable part is before the colon.
    """
    return {Path(argv0).name, Path(argv0.split(":", 1)[0].strip()).name}


def send_signal(record: ProcessRecord, sig: signal.Signals, *, group: bool = False) -> bool:
    """Send ``sig`` to the process (or its whole process group) if it is still ours."""
    if not is_running(record):
        return False
    try:
        if group:
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_exit(
    record: ProcessRecord, timeout: float, popen: subprocess.Popen[bytes] | None = None
) -> bool:
    """Wait up to ``timeout`` seconds for the process to exit; True if it did.

    Our own child is reaped through ``popen`` (otherwise it lingers as a zombie); a process
    adopted from ``stack.json`` belongs to init, which reaps it, so polling /proc is enough.
    """
    if popen is not None and popen.pid == record.pid:
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while is_running(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill_tree(record: ProcessRecord, popen: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGKILL the process, its process group and its direct children; wait until all are gone.

    Returns False if the process was no longer ours to kill.
    """
    if not is_running(record):
        wait_exit(record, 0, popen)
        return False
    children = children_of(record.pid)
    send_signal(record, signal.SIGKILL, group=True)
    for child in children:
        send_signal(child, signal.SIGKILL)
    wait_exit(record, 10.0, popen)
    for child in children:
        wait_exit(child, 10.0)
    return True


def stop_process(
    record: ProcessRecord,
    steps: Sequence[tuple[signal.Signals, float]],
    popen: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Send each signal in turn, waiting its grace period; SIGKILL the group if all are ignored.

    Returns True if the process had to be killed.
    """
    for sig, grace in steps:
        if not send_signal(record, sig):
            wait_exit(record, 0, popen)  # reap if it had already exited
            return False
        if wait_exit(record, grace, popen):
            return False
    kill_tree(record, popen)
    return True
