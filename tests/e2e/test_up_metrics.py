"""``duetime up`` gives every service a /metrics port of its own, prints where they are, and each
one answers with its service's metrics while the demo runs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from duetime_infra.ports import find_free_port, port_is_free
from tests.fixtures.terminal import as_from_a_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

# A metric each service exports, and must have counted during a demo run.
COUNTED = {
    "planner": "duetime_runs_planned_total",
    "dispatcher": "duetime_runs_released_total",
    "worker": "duetime_runs_started_total",
    "reaper": "duetime_consumer_lag",
    "api": "duetime_api_requests_total",  # up itself asks /healthz until the API answers
}


def _samples(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def _free_base() -> int:
    """A base below the kernel's ephemeral range with the next few ports free too: inside that
    range, an outgoing connection may take one of the services' ports as its source port between
    ``up``'s probe and the service's bind (the API's /metrics once lost that race)."""
    while True:
        base = find_free_port()
        if all(port_is_free(base + i, reuse_address=False) for i in range(1, 8)):
            return base


def test_up_prints_a_metrics_url_per_service_and_each_answers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    env["DUETIME_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONUNBUFFERED"] = "1"
    base = _free_base()
    # Taken by someone else: duetime up must skip it, not hand it to a service.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", base + 1))
    squatter.listen()
    log_path = tmp_path / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "duetime.cli.main", "up", "--demo", "--metrics-port", str(base)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=as_from_a_terminal(),
        )
    try:
        deadline = time.monotonic() + 120
        urls: dict[str, str] = {}
        counted: dict[str, float] = {}
        while time.monotonic() < deadline:
            assert up.poll() is None, log_path.read_text()
            text = log_path.read_text()
            urls = dict(re.findall(r"metrics\.url name=(\w+) url=(\S+)", text))
            if set(urls) == set(COUNTED):
                try:
                    counted = {name: _samples(urls[name]).get(COUNTED[name], 0.0) for name in urls}
                except OSError:
                    counted = {}
                if counted and all(counted.values()):
                    break
            time.sleep(1.0)
        else:
            pytest.fail(f"metrics not all counted: {urls} {counted}\n{log_path.read_text()}")
        ports = sorted(int(url.rsplit(":", 1)[1].split("/")[0]) for url in urls.values())
        assert len(set(ports)) == len(COUNTED) and base + 1 not in ports
        assert ports[0] == base
        assert all(url.startswith("http://127.0.0.1:") for url in urls.values())
        text = log_path.read_text()
        assert "metrics.failed" not in text
        for name in COUNTED:
            assert re.search(
                rf"^{name}\s*\|.*metrics\.listening url={re.escape(urls[name])}", text, re.MULTILINE
            ), text
    finally:
        squatter.close()
        up.send_signal(signal.SIGINT)
        code = up.wait(60)
    assert code == 0, log_path.read_text()
