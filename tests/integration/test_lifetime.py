"""duetime.lifetime on real processes: a child dies with its parent however the parent dies, an
orphan whose clean stop hangs is ended after its grace, and a stop deadline ends a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)

# Started by the test; starts CHILD with the parent-death signal, prints the pids CHILD prints.
PARENT = """
import os, signal, subprocess, sys, time
from duetime.lifetime import parent_death_preexec
child = subprocess.Popen(
    [sys.executable, sys.argv[1], str(os.getpid())],
    stdout=subprocess.PIPE,
    text=True,
    preexec_fn=parent_death_preexec(signal.SIGTERM),
    start_new_session=True,
)
print(child.stdout.readline(), end="", flush=True)
time.sleep(60)
"""
# A service whose clean stop never ends (it ignores SIGTERM), watching its parent with a 1 s grace;
# it started a grandchild in its own process group.
CHILD = """
import os, signal, subprocess, sys, time
from duetime.lifetime import watch_parent
signal.signal(signal.SIGTERM, signal.SIG_IGN)
watch_parent(int(sys.argv[1]), 1.0, "test-child")
grandchild = subprocess.Popen(["sleep", "60"])
print(os.getpid(), grandchild.pid, flush=True)
time.sleep(60)
"""
# A child that does nothing about its parent: only the kernel's signal can end it.
PLAIN_CHILD = """
import os, time
print(os.getpid(), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _gone_within(pids: list[int], timeout: float) -> float:
    """Seconds until none of ``pids`` runs; fails after ``timeout``."""
    began = time.monotonic()
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() - began < timeout, [pid for pid in pids if _alive(pid)]
        time.sleep(0.05)
    return time.monotonic() - began


def _start_parent(tmp_path: Path, child: str) -> tuple[subprocess.Popen[str], list[int]]:
    (tmp_path / "parent.py").write_text(PARENT)
    (tmp_path / "child.py").write_text(textwrap.dedent(child))
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "child.py")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, "the child printed no pids"
    return parent, [int(pid) for pid in line.split()]


def _kill_left(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@linux_only
def test_a_child_dies_with_its_parent_killed_by_sigkill(tmp_path: Path) -> None:
    parent, pids = _start_parent(tmp_path, PLAIN_CHILD)
    try:
        assert _alive(pids[0])
        parent.kill()
        parent.wait()
        _gone_within(pids, 5.0)
    finally:
        _kill_left(pids)


def test_an_orphan_whose_stop_hangs_kills_its_group_after_the_grace(tmp_path: Path) -> None:
    parent, pids = _start_parent(tmp_path, CHILD)
    try:
        assert all(_alive(pid) for pid in pids)
        parent.kill()
        parent.wait()
        took = _gone_within(pids, 1.0 + 4.0)
        assert took >= 0.9, "ended before its grace was over"
    finally:
        _kill_left(pids)


def test_a_stop_deadline_ends_a_process_that_does_not_finish() -> None:
    script = "import time\nfrom duetime.lifetime import exit_after\nexit_after(0.5, 'test')\n"
    began = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-c", script + "time.sleep(60)\n"],
        timeout=10,
        capture_output=True,
        text=True,
    )
    assert process.returncode == 70
    assert "process.hard_exit process=test reason=stop_overran" in process.stderr
    assert time.monotonic() - began >= 0.5
