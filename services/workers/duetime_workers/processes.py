"""``--processes N``: one supervising process, N worker processes, one consumer group.

Each worker process is a complete worker (its own consumer in the shared group, its own database
pool and producer), so the partitions of ``runs.ready`` spread over them and a spike uses every
core. The supervisor only starts them, restarts one that dies (after a pause that doubles up to
30 s), and stops them:

- SIGTERM or SIGINT to the supervisor is passed on to every worker process, which drains as a
  lone worker would (``shutdown_grace``) and ends itself when its stop overruns its deadline;
  the supervisor kills any still running ``stop_timeout`` after the signal. When the whole
  process group is signalled, a worker receives the signal twice (directly and passed on); a
  worker counts a repeat within a second as the same request, so only a deliberate second
  signal cuts the grace short.
- Each worker process asks the kernel to send it SIGTERM when the supervisor dies
  (``PR_SET_PDEATHSIG`` on Linux), so a SIGKILLed supervisor leaves no worker behind.
- ``/metrics`` (when ``DUETIME_METRICS_PORT`` is set) is served by the supervisor alone: the
  worker processes write their counters to files in a private directory
  (``PROMETHEUS_MULTIPROC_DIR``, prometheus-client's multiprocess mode) and the supervisor
  merges them on each scrape, so one URL covers the service and counts survive a worker
  process's restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from duetime.errors import ConfigError
from duetime.metrics import METRICS_PORT_ENV, MetricsEndpoint, metrics_address, serve_metrics

from .logs import event

__all__ = ["child_argv", "die_with_parent", "process_count", "supervise"]

CHILD_ENV = "DUETIME_WORKER_CHILD"
_PR_SET_PDEATHSIG = 1
_RESTART_FIRST = 1.0
_RESTART_MAX = 30.0
_OWN_OPTIONS = ("--processes", "--worker-id")
_METRICS_DIR_PREFIX = "duetime-worker-metrics-"


def process_count(requested: int | None, env: Mapping[str, str]) -> int:
    """Worker processes to run: the option, else ``DUETIME_WORKER_PROCESSES``, else the cores."""
    if env.get(CHILD_ENV) == "1":
        return 1
    value: int | None = requested
    raw = env.get("DUETIME_WORKER_PROCESSES", "")
    if value is None and raw:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"DUETIME_WORKER_PROCESSES must be an integer, not {raw!r}") from None
    if value is None:
        value = os.cpu_count() or 1
    if not 1 <= value <= 64:
        raise ConfigError(f"processes must be between 1 and 64, not {value}")
    return value


def child_argv(argv: Sequence[str] | None) -> list[str]:
    """The command-line options for a worker process: ours minus the supervisor's own."""
    source = list(sys.argv[1:] if argv is None else argv)
    out: list[str] = []
    skip = False
    for arg in source:
        if skip:
            skip = False
            continue
        if arg in _OWN_OPTIONS:
            skip = True
            continue
        if arg.startswith(tuple(f"{o}=" for o in _OWN_OPTIONS)):
            continue
        out.append(arg)
    return out


def die_with_parent() -> None:
    """In a worker process started by ``supervise``: get SIGTERM when the supervisor dies."""
    if os.environ.get(CHILD_ENV) != "1" or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class _Supervisor:
    def __init__(self, count: int, base_id: str, argv: list[str], env: Mapping[str, str]):
        self.count = count
        self.base_id = base_id
        self.argv = argv
        self.env = dict(env)
        self.stopping = False
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.restart_at: dict[int, float] = {}
        self.pause: dict[int, float] = {}
        self.failed = False
        self.metrics_dir: str | None = None
        self.endpoint: MetricsEndpoint | None = None

    def serve_metrics(self) -> None:
        """Serve the worker processes' merged metrics, if a port is configured."""
        if metrics_address(self.env) is None:
            return
        _remove_stale_metrics_dirs()
        self.metrics_dir = tempfile.mkdtemp(prefix=f"{_METRICS_DIR_PREFIX}{os.getpid()}-")
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.metrics_dir)  # type: ignore[no-untyped-call]
        self.endpoint = serve_metrics("worker", self.env, registry)

    def close_metrics(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()
        if self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def start(self, index: int) -> None:
        env = {
            **self.env,
            CHILD_ENV: "1",
            "DUETIME_WORKER_ID": f"{self.base_id}-{index}",
            "DUETIME_WORKER_PROCESSES": "1",
        }
        env.pop(METRICS_PORT_ENV, None)  # the supervisor serves them all
        if self.metrics_dir is not None:
            env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir
        self.children[index] = subprocess.Popen(
            [sys.executable, "-m", "duetime_workers", *self.argv], env=env
        )
        event("worker.process_started", index=index, pid=self.children[index].pid)

    def on_signal(self, signum: int, _frame: object) -> None:
        self.stopping = True
        for child in self.children.values():
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

    def watch(self) -> None:
        now = time.monotonic()
        for index, child in list(self.children.items()):
            code = child.poll()
            if code is None or index in self.restart_at:
                continue
            pause = self.pause.get(index, _RESTART_FIRST)
            event(
                "worker.process_exited", index=index, pid=child.pid, code=code, restart_in_s=pause
            )
            self.failed = self.failed or code != 0
            if self.metrics_dir is not None:
                # Its in-flight gauge goes with it; its counters stay.
                mark_process_dead(child.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
            self.restart_at[index] = now + pause
            self.pause[index] = min(pause * 2, _RESTART_MAX)
        for index, at in list(self.restart_at.items()):
            if now >= at:
                del self.restart_at[index]
                self.start(index)

    def wait_all(self, stop_timeout: float) -> int:
        deadline = time.monotonic() + stop_timeout
        code = 0
        for child in self.children.values():
            try:
                result = child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                result = child.wait()
            code = code or (1 if result not in (0, -signal.SIGTERM, -signal.SIGINT) else 0)
        return code


def _remove_stale_metrics_dirs() -> None:
    """Remove the metrics directories of supervisors that died without cleaning up (SIGKILL):
    the supervisor's pid is in the name."""
    for path in Path(tempfile.gettempdir()).glob(f"{_METRICS_DIR_PREFIX}*-*"):
        pid = path.name[len(_METRICS_DIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def supervise(
    count: int, base_id: str, argv: list[str], env: Mapping[str, str], *, stop_timeout: float
) -> int:
    """Run ``count`` worker processes until SIGTERM/SIGINT; the exit code of the worst one.
    Worker processes still running ``stop_timeout`` seconds after the signal are killed."""
    sup = _Supervisor(count, base_id, argv, env)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, sup.on_signal)
    sup.serve_metrics()
    event("worker.supervisor_started", processes=count, worker_id=base_id)
    try:
        for index in range(count):
            sup.start(index)
        while not sup.stopping:
            time.sleep(0.2)
            if not sup.stopping:
                sup.watch()
        code = sup.wait_all(stop_timeout)
    finally:
        sup.close_metrics()
    event("worker.supervisor_stopped", code=code)
    return code
