"""``duetime up`` stops everything it started, however it is stopped.

- Any number of SIGTERM and SIGINT to its process group (a terminal, ``timeout``, systemd and
  container runtimes signal the whole group, and wrappers such as ``make`` and ``uv run`` forward
  the signal again), after start-up or while the stack is still starting.
- ``make up`` (the README's first command) given SIGTERM to its process group: make, ``uv run``
  and ``duetime up`` all get it, make and uv forward it again, and make exits once all stopped.
- SIGKILL to ``duetime up`` itself: its services and servers end by themselves.
- A run that died leaving things behind: the next ``duetime up`` on the data dir stops them.

Every check is on real processes: the pids ``up.json`` and ``stack.json`` record, the worker's
processes and PostgreSQL's backends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from duetime.cli.up_record import RECORD_FILE, UpRecord
from duetime.config import read_env_file
from duetime.lifetime import parent_death_preexec
from duetime_infra import EmbeddedStack
from duetime_infra.processes import child_record, children_of
from tests.fixtures.terminal import as_from_a_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 120.0
# The services' stop grace (10 s) and the slowest server's stop, with slack for 2 busy cores.
GONE_TIMEOUT = 30.0


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _left_after(pids: set[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return sorted(pid for pid in pids if _alive(pid))


def _descendants(pid: int, depth: int) -> set[int]:
    """The live processes ``depth`` generations below ``pid`` and those in between."""
    found: set[int] = set()
    parents = {pid}
    for _ in range(depth):
        parents = {child.pid for parent in parents for child in children_of(parent)}
        found |= parents
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


class Up:
    """``duetime up --data-dir DIR`` in a session of its own, its console in a file; or
    ``command``, a wrapper that runs it, given the data dir as ``DUETIME_DATA_DIR``."""

    def __init__(self, tmp_path: Path, name: str = "up", command: list[str] | None = None) -> None:
        self.data_dir = tmp_path / "data"
        self.log_path = tmp_path / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
        env["DUETIME_DATA_DIR"] = str(self.data_dir)
        env["PYTHONUNBUFFERED"] = "1"
        argv = command or [
            sys.executable,
            "-m",
            "duetime.cli.main",
            "up",
            "--data-dir",
            str(self.data_dir),
            "--summary-every",
            "0",
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # A terminal's SIGINT (the tests send it), SIGTERM if the test session dies.
                preexec_fn=as_from_a_terminal(),
            )
        self.seen: set[int] = set()

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.process.poll() is None, f"up exited before {needle}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {needle} in {timeout:.0f} s:\n{self.text()}"
            time.sleep(0.1)

    def pids(self) -> set[int]:
        """Every process up runs now: services, worker processes, servers, backends."""
        record = UpRecord.from_json(json.loads((self.data_dir / RECORD_FILE).read_text()))
        services = {r.pid for r in record.services.values()}
        servers = {
            component["process"]["pid"]
            for component in json.loads((self.data_dir / "stack.json").read_text())[
                "components"
            ].values()
            if component.get("process")
        }
        found = services | servers
        for pid in list(found):
            found.update(child.pid for child in children_of(pid))
        self.seen |= found
        return found

    def signal_group(self, sig: signal.Signals) -> None:
        os.killpg(self.process.pid, sig)

    def cleanup(self) -> None:
        """After a failure: leave nothing behind whatever the test got to."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # a wrapper's children too
            self.process.wait(10)
        _kill(self.seen)
        EmbeddedStack(self.data_dir, migrate=False).down()


def _wait_running(up: Up) -> None:
    """Up, and every service past its start-up (signal handlers installed)."""
    up.wait_for("up.ready")
    for name in ("planner", "dispatcher", "worker", "reaper", "api"):
        up.wait_for(f"{name}.started")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    process = Up(tmp_path)
    try:
        yield process
    finally:
        process.cleanup()


def test_any_number_of_signals_to_the_group_stops_everything(up: Up) -> None:
    _wait_running(up)
    pids = up.pids()
    assert len(pids) >= 8 + 2, up.text()  # four services, the API, three servers, children

    # A second up on the same data dir refuses to start, naming the first.
    second = subprocess.run(
        [sys.executable, "-m", "duetime.cli.main", "up", "--data-dir", str(up.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert f"another duetime up (pid {up.process.pid}) is running" in second.stderr

    # As `make up` under `timeout` gets it: the group's signal, forwarded again at once.
    up.signal_group(signal.SIGTERM)
    up.signal_group(signal.SIGTERM)
    time.sleep(0.3)
    up.signal_group(signal.SIGINT)
    assert up.process.wait(GONE_TIMEOUT + 30) == 0, up.text()
    assert _left_after(pids, GONE_TIMEOUT) == [], up.text()
    text = up.text()
    # Two signals sent together may arrive as one; the one sent later is counted on its own.
    received = re.search(r"up\.stopped signals=(\d+)", text)
    assert received is not None and int(received.group(1)) >= 2, text
    assert text.count("service.stopped") == 5
    assert "stack.stopped" in text
    assert not (up.data_dir / RECORD_FILE).exists()


def test_sigterm_to_the_group_of_make_up_stops_everything(tmp_path: Path) -> None:
    # -o: the stamp is up to date (this test runs in the synced venv); make must not re-sync
    # the venv under the running test if a checkout left pyproject.toml newer than the stamp.
    make = ["make", "--no-print-directory", "-C", str(REPO_ROOT), "-o", ".venv/.synced", "up"]
    up = Up(tmp_path, name="make-up", command=make)
    try:
        _wait_running(up)
        # uv run (make's child) and duetime up (uv's); pids() has up's services and servers.
        wrappers = _descendants(up.process.pid, depth=2)
        up.seen |= wrappers
        pids = up.pids()
        assert len(wrappers) == 2, up.text()
        assert len(pids) >= 9 + 2, up.text()  # four services, the API, four servers, children

        up.signal_group(signal.SIGTERM)
        code = up.process.wait(GONE_TIMEOUT + 30)
        # make waits for its recipe, then ends by the signal it got.
        assert code == -signal.SIGTERM, up.text()
        assert _left_after(wrappers | pids, GONE_TIMEOUT) == [], up.text()
        text = up.text()
        assert text.count("service.stopped") == 5
        assert "stack.stopped" in text
        assert not (up.data_dir / RECORD_FILE).exists()
    finally:
        up.cleanup()


def test_signals_while_the_stack_starts_stop_everything(up: Up) -> None:
    up.wait_for("stack.starting")
    up.signal_group(signal.SIGTERM)
    time.sleep(0.2)
    up.signal_group(signal.SIGTERM)
    assert up.process.wait(GONE_TIMEOUT + 30) == 0, up.text()
    text = up.text()
    assert "service.started" not in text
    assert "stack.stopped" in text
    stack = json.loads((up.data_dir / "stack.json").read_text())
    assert all(component["process"] is None for component in stack["components"].values())
    assert read_env_file(up.data_dir / "stack.env") == {}


def test_services_and_servers_end_by_themselves_when_up_is_killed(up: Up) -> None:
    _wait_running(up)
    pids = up.pids()
    up.process.kill()
    up.process.wait(10)
    assert _left_after(pids, GONE_TIMEOUT) == [], up.text()


def test_the_next_up_stops_what_a_dead_run_left_behind(tmp_path: Path) -> None:
    """A run that died without its servers and services noticing (a platform without the
    kernel's parent-death signal): the stack runs, a service runs, up.json names them."""
    data_dir = tmp_path / "data"
    left: set[int] = set()
    # Tied to this test process (so a killed test session leaves nothing), not to any up.
    stack = EmbeddedStack(data_dir, durable=False, die_with_owner=True)
    fresh: Up | None = None
    try:
        urls = stack.up()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
        argv = [sys.executable, "-m", "duetime.cli.main", "service", "reaper"]
        with (tmp_path / "stale-reaper.log").open("wb") as log:
            reaper = subprocess.Popen(
                argv,
                env={**env, **urls.as_env(), "DUETIME_DATA_DIR": str(data_dir)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_preexec(signal.SIGTERM),
            )
        servers = {s.pid for s in stack.status() if s.pid is not None}
        left = {reaper.pid, *servers}
        dead = subprocess.Popen(["true"])  # the supervisor: a process that no longer runs
        dead.wait()
        record = UpRecord(
            supervisor_pid=dead.pid,
            owns_stack=True,
            services={"reaper": child_record(reaper.pid, argv)},
        )
        (data_dir / RECORD_FILE).write_text(json.dumps(record.to_json()))

        fresh = Up(tmp_path, name="fresh")
        fresh.wait_for("up.ready")
        text = fresh.text()
        assert "up.stale_run_found" in text
        assert "up.stale_services_stopped names=reaper" in text
        assert "up.stale_stack_stopped components=postgres,kafka,etcd,s3" in text
        assert reaper.wait(1) is not None  # reaped: it was our child
        assert _left_after(servers, 5) == []
        _wait_running(fresh)
        pids = fresh.pids()
        assert pids.isdisjoint(left)
        fresh.process.send_signal(signal.SIGTERM)
        assert fresh.process.wait(GONE_TIMEOUT + 30) == 0, fresh.text()
        assert _left_after(pids, GONE_TIMEOUT) == [], fresh.text()
    finally:
        if fresh is not None:
            fresh.cleanup()
        _kill(left)
        stack.down()
