"""Keep a process from outliving what started it, and bound how long a stop may take.

A supervisor that dies without cleaning up (SIGKILL, the OOM killer, a crash) leaves its children
running: they are re-parented to init and nothing ever stops them. And a process asked to stop
can hang in its clean-up (a flush to a broker that is gone). Three mechanisms close those gaps:

- ``parent_death_preexec(sig)``: a ``preexec_fn`` for ``subprocess.Popen`` that asks the kernel
  to send ``sig`` to the child when its parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux only;
  elsewhere there is none and it returns None). It runs between fork and exec, so it works for
  any program (PostgreSQL, etcd, tansu), and it exits at once if the parent died before the call,
  since the kernel would then never send the signal.
- ``watch_parent(pid, grace, what)``: in a Python child, a daemon thread that waits for the parent
  to exit; then, where the kernel sends no signal, it sends SIGTERM itself, and ``grace`` seconds
  later it kills its own process group. A clean-up that hangs cannot keep an orphan alive.
- ``exit_after(grace, what)``: once a stop has begun, end the process ``grace`` seconds later,
  whatever it is still waiting for. ``exit_after_stop(stopping, grace, what)`` arms it when an
  event is set, so that the deadline runs from the signal, not from the moment a main loop stuck
  in a call that hangs gets round to its clean-up.

Caveat: the kernel sends the parent-death signal when the *thread* that forked the child exits,
not the whole process. Start such children from a thread that lives as long as they should (the
main thread), never from a short-lived worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

from duetime.logs import event

__all__ = [
    "PARENT_DEATH_SIGNAL_AVAILABLE",
    "exit_after",
    "exit_after_stop",
    "hard_exit",
    "parent_death_preexec",
    "watch_parent",
]

_PR_SET_PDEATHSIG = 1
# The exit status of a process that ended itself because a stop overran its grace period.
_DEADLINE_EXIT_CODE = 70

_logger = logging.getLogger("duetime.lifetime")


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved once in the parent.

    Resolving it after fork (``dlopen``) could deadlock on a loader lock another thread held at
    the moment of the fork; calling an already resolved function takes no lock.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()
#: Whether children can be given a parent-death signal on this platform.
PARENT_DEATH_SIGNAL_AVAILABLE = _PRCTL is not None


def parent_death_preexec(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel send ``sig`` to the child when we die.

    Call it in the thread that starts the child (the signal follows that thread, see the module
    docstring). Returns None where the platform has no such signal, which ``Popen`` accepts.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()
    number = int(sig)

    def arm() -> None:
        # Runs in the child between fork and exec: no allocation-heavy work, no imports.
        prctl(_PR_SET_PDEATHSIG, number, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return arm


def watch_parent(parent_pid: int, grace: float, what: str) -> threading.Thread:
    """Stop this process if ``parent_pid`` (our parent) exits, however it exits.

    The kernel's parent-death signal (SIGTERM, armed by the parent through
    ``parent_death_preexec``) starts the process's own clean stop; where the platform has none,
    this thread sends SIGTERM instead. Either way, ``grace`` seconds after the parent is gone the
    process group is killed, so a stop that hangs cannot leave an orphan behind.
    """
    thread = threading.Thread(
        target=_watch, args=(parent_pid, grace, what), name="parent-watch", daemon=True
    )
    thread.start()
    return thread


def _watch(parent_pid: int, grace: float, what: str) -> None:
    _wait_for_parent_exit(parent_pid)
    event(_logger, "process.parent_gone", logging.WARNING, process=what, parent_pid=parent_pid)
    if not PARENT_DEATH_SIGNAL_AVAILABLE:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    # Its parent started it as the leader of its own group; what it started is in that group.
    hard_exit(what, "parent_gone", grace, group=True)


def _wait_for_parent_exit(parent_pid: int) -> None:
    """Block until ``parent_pid`` is no longer our parent (it exited; we were re-parented)."""
    if os.getppid() != parent_pid:
        return
    try:
        handle = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):  # not Linux 5.3+: poll the parent pid instead
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        return
    try:
        # Checked after opening: if it is still our parent now, the handle is the parent's and
        # not a later process's that reused the pid.
        if os.getppid() == parent_pid:
            select.select([handle], [], [])  # readable once the process has exited
    finally:
        os.close(handle)


def exit_after(grace: float, what: str) -> threading.Timer:
    """End this process ``grace`` seconds from now unless it has exited by then.

    For a stop that has begun: whatever the clean-up still waits for (a flush to a broker that is
    gone) is cut short. The timer is a daemon, so a process that finishes in time exits normally.
    """
    timer = threading.Timer(
        grace, hard_exit, args=(what, "stop_overran", grace), kwargs={"group": False}
    )
    timer.name = "stop-deadline"
    timer.daemon = True
    timer.start()
    return timer


def exit_after_stop(stopping: threading.Event, grace: float, what: str) -> threading.Thread:
    """End this process ``grace`` seconds after ``stopping`` is set, unless it has exited.

    Set ``stopping`` where the stop is asked for (a signal handler): the deadline then covers
    everything after it, the round in progress included, and the interpreter's own exit (which
    joins threads that may be stuck on a connection that is gone).
    """

    def watch() -> None:
        stopping.wait()
        time.sleep(grace)
        hard_exit(what, "stop_overran", grace, group=False)

    thread = threading.Thread(target=watch, name="stop-deadline", daemon=True)
    thread.start()
    return thread


def hard_exit(what: str, reason: str, grace: float, *, group: bool) -> None:
    """Log why, then end the process at once; with ``group``, its process group if it leads one.

    Only a process that knows it was started as the leader of a group of its own should pass
    ``group``: from a shell, the leader of a pipeline's group shares it with the other commands.
    """
    event(_logger, "process.hard_exit", logging.ERROR, process=what, reason=reason, grace_s=grace)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(OSError, ValueError):  # a broken pipe, a closed stream
        sys.stdout.flush()
    if group and os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(_DEADLINE_EXIT_CODE)
