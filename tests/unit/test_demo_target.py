"""The demo's HTTP target (``duetime up --demo``): a caller that hangs up is not an error."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from duetime.cli import demo
from duetime.cli.demo import DemoTarget


def test_a_caller_that_hangs_up_before_the_slow_answer_prints_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo, "_SLOW_ANSWER", 0.2)
    target = DemoTarget()
    target.start()
    try:
        # What a stopping worker does to a slow run: it hands it back and closes the connection.
        with socket.create_connection(("127.0.0.1", target.port)) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
            conn.sendall(b"POST /slow/x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
            deadline = time.monotonic() + 5
            while not target.requests and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(0.5)  # the answer is written to a connection reset by the caller
        assert [r["path"] for r in target.requests] == ["/slow/x"]
    finally:
        target.stop()
    assert "Traceback" not in capfd.readouterr().err
