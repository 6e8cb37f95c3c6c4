"""``python -m duetime_planner`` as a process: it stops within its grace with its database gone.

The planner's loop waits on PostgreSQL in every round; when PostgreSQL goes silent (a TCP proxy
stops passing bytes: a partition, where nothing fails) the round never ends, and neither would a
stop that waited for it. The stop deadline runs from the signal instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from duetime.cli.supervisor import STOP_GRACE
from duetime_planner.service import STOP_DEADLINE
from tests.fixtures.proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = 30.0


def test_stops_within_its_grace_when_the_database_is_cut_off(
    database_url: str, stack: Any, tmp_path: Path
) -> None:
    assert STOP_DEADLINE < STOP_GRACE  # what duetime up gives a service before SIGKILL
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")},
        "DUETIME_DATABASE_URL": proxied,
        "DUETIME_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "DUETIME_TOPIC_PREFIX": f"p{uuid.uuid4().hex[:8]}.",
        "DUETIME_DATA_DIR": str(tmp_path / "data"),
    }
    log = tmp_path / "planner.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "duetime_planner", "--tick", "0.1"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + WAIT
        while " planner.started " not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the planner never started"
            time.sleep(0.05)
        proxy.set_mode("blackhole")
        time.sleep(1.0)  # rounds every 0.1 s: one is now waiting on the silent database
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {STOP_GRACE} s after SIGTERM") from None
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
    assert took < STOP_GRACE, log.read_text()
    assert proc.returncode in (0, 70), log.read_text()
