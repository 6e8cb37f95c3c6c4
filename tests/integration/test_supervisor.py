"""The Supervisor of ``duetime up`` on real child processes: restarts without blocking, stops
what ignores SIGTERM, and keeps working when the terminal or pipe it writes to is gone."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable

import pytest

from duetime.cli.supervisor import Supervisor

pytestmark = pytest.mark.integration

# Exits at once with status 3.
DIES = [sys.executable, "-c", "import sys; sys.exit(3)"]
# Ignores SIGTERM, says so, and waits.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring', flush=True)\n"
    "time.sleep(60)\n",
]


def _wait(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_service_that_dies_is_restarted_after_a_back_off_and_check_never_blocks() -> None:
    out = io.StringIO()
    sup = Supervisor(out=out)
    sup.add("dies", DIES, dict(os.environ))
    sup.start_all()
    [spec] = sup.services
    assert spec.process is not None
    spec.process.wait(30)
    try:
        began = time.monotonic()
        assert sup.check() == ["dies"]
        assert sup.check() == []  # reported once; the restart waits for its back-off
        assert time.monotonic() - began < 0.5
        assert "service.exited name=dies code=3" in out.getvalue()
        _wait(lambda: sup.check() == [] and spec.process is not None, 2.0 + 3.0)
        assert time.monotonic() - began >= 2.0  # the first back-off
        assert out.getvalue().count("service.started name=dies") == 2
    finally:
        sup.stop_all(grace=1.0)


def test_a_service_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    out = io.StringIO()
    sup = Supervisor(out=out)
    sup.add("stubborn", STUBBORN, dict(os.environ))
    sup.start_all()
    _wait(lambda: "ignoring" in out.getvalue(), 30.0)
    began = time.monotonic()
    sup.stop_all(grace=0.5)
    assert 0.5 <= time.monotonic() - began < 5.0
    assert "service.killed name=stubborn" in out.getvalue()
    assert sup.services[0].process is not None
    assert sup.services[0].process.returncode == -9


def test_a_closed_pipe_does_not_stop_the_supervisor() -> None:
    """``make up | tee log`` where the same signal ended tee: writes fail, stopping goes on."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    out = os.fdopen(write_end, "w")
    sup = Supervisor(out=out)
    sup.add("stubborn", STUBBORN, dict(os.environ))
    sup.start_all()  # says service.started into the broken pipe
    sup.say("duetime", "up.stopping")
    sup.stop_all(grace=0.5)
    assert sup.services[0].process is not None
    assert sup.services[0].process.returncode is not None
    with contextlib.suppress(BrokenPipeError):
        out.close()


def test_every_line_a_service_prints_reaches_on_line_with_its_name() -> None:
    out = io.StringIO()
    seen: list[tuple[str, str]] = []
    sup = Supervisor(out=out, on_line=lambda name, line: seen.append((name, line)))
    sup.add("talks", [sys.executable, "-c", "print('one'); print('two')"], dict(os.environ))
    sup.start_all()
    try:
        _wait(lambda: len(seen) >= 2, 10.0)
        assert seen == [("talks", "one"), ("talks", "two")]
        assert "| one" in out.getvalue()  # still printed, prefixed
    finally:
        sup.stop_all(grace=1.0)
