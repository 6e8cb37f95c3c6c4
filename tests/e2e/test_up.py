"""``duetime up --demo`` as a user runs it: demo runs succeed, the failing job goes dead, the
reaper's consumer group commits offsets on ``runs.heartbeats``, the REST API answers with the
admin token of ``api.json`` (mode 0600), the printed one-time sign-in link opens the dashboard
once (and its code is not in the API's access log), the jobs topic is guarded (an unsigned record
is rejected), and one SIGINT (Ctrl-C) stops every service and server it started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from duetime.bus.records import JOB_DEFINITIONS
from duetime.bus.topics import TopicCatalog
from duetime.cli.topic_secret import TOPIC_SECRET_FILE
from duetime.config import read_env_file
from duetime.jobdef import parse_job
from duetime.jobs_guard import signature_headers
from duetime.store import Store
from tests.fixtures.terminal import as_from_a_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _wait_for_reaper_commits(bootstrap: str, deadline: float) -> dict[int, int]:
    """The offsets the group ``duetime.reaper`` committed on ``duetime.runs.heartbeats``, by
    partition, once at least one is past the start (asked without joining the group)."""
    catalog = TopicCatalog()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": catalog.reaper_group})
    try:
        while True:
            partitions = [TopicPartition(catalog.heartbeats, p) for p in range(catalog.partitions)]
            committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, 10)}
            if any(offset > 0 for offset in committed.values()) or time.monotonic() > deadline:
                return committed
            time.sleep(0.5)
    finally:
        consumer.close()


def test_up_demo_runs_and_ctrl_c_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    env["DUETIME_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONUNBUFFERED"] = "1"
    log_path = tmp_path / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "duetime.cli.main", "up", "--demo", "--summary-every", "2"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            # If the test session dies, up gets SIGTERM and stops all it started.
            preexec_fn=as_from_a_terminal(),
        )
    pids: set[int] = set()
    store: Store | None = None
    try:
        deadline = time.monotonic() + 90
        states: dict[tuple[str, str], int] = {}
        while time.monotonic() < deadline:
            assert up.poll() is None, log_path.read_text()
            urls = read_env_file(tmp_path / "data" / "stack.env")
            if store is None and urls.get("DUETIME_DATABASE_URL"):
                store = Store(urls["DUETIME_DATABASE_URL"], pool_size=1)
            if store is not None:
                try:
                    rows = store.runs_list(None, 500)
                except Exception:
                    rows = []
                states = {}
                for row in rows:
                    states[(row.job_id, row.state)] = states.get((row.job_id, row.state), 0) + 1
                if states.get(("demo-every-5s", "succeeded")) and states.get(
                    ("demo-always-fails", "dead")
                ):
                    break
            time.sleep(0.5)
        else:
            pytest.fail(f"demo did not reach succeeded + dead: {states}\n{log_path.read_text()}")
        # The reaper reads the workers' heartbeats in its own group and commits what it read.
        committed = _wait_for_reaper_commits(urls["DUETIME_KAFKA_BOOTSTRAP"], time.monotonic() + 30)
        assert any(offset > 0 for offset in committed.values()), committed
        text = log_path.read_text()
        pids = {int(p) for p in re.findall(r"service\.started name=\w+ pid=(\d+)", text)}
        stack = json.loads((tmp_path / "data" / "stack.json").read_text())
        for component in stack["components"].values():
            if component.get("process"):
                pids.add(int(component["process"]["pid"]))
        assert len(pids) == 9, text  # four services, the API, four servers (S3 among them)
        assert all(_alive(pid) for pid in pids)
        _check_api(tmp_path / "data" / "api.json", text)
        assert store is not None
        _check_jobs_guard(tmp_path / "data", urls, store, env, text)
    finally:
        if store is not None:
            store.close()
        up.send_signal(signal.SIGINT)
        code = up.wait(60)
    assert code == 0, log_path.read_text()
    assert not [pid for pid in pids if _alive(pid)], log_path.read_text()
    text = log_path.read_text()
    assert "stack.stopped" in text
    assert text.count("service.stopped") == 5
    # The admin token is in api.json only: never on the terminal.
    assert json.loads((tmp_path / "data" / "api.json").read_text())["admin_token"] not in text
    # The sign-in link's code is on duetime's own line only: the API's access log cut it out.
    code = _sign_in_link(text).rsplit("/", 1)[1]
    api_lines = [line for line in text.splitlines() if line.startswith("api")]
    assert any('"GET /ui/sign-in/<redacted> HTTP/1.1" 303' in line for line in api_lines), text
    assert any('"GET /ui/sign-in/<redacted> HTTP/1.1" 410' in line for line in api_lines), text
    assert [line for line in text.splitlines() if code in line] == [
        line for line in text.splitlines() if line.startswith("duetime") and "dashboard.url" in line
    ]


def _check_jobs_guard(
    data_dir: Path, urls: dict[str, str], store: Store, env: dict[str, str], log: str
) -> None:
    """The planner runs with the jobs-topic guard on, with the secret up made (mode 0600): a
    record signed with the key `duetime tokens topic-key` prints is stored, an unsigned one goes
    to jobs.rejected."""
    secret_file = data_dir / TOPIC_SECRET_FILE
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert re.search(r"^planner\s*\|.*jobs\.guard_on", log, re.MULTILINE), log
    assert "jobs.guard_off" not in log
    key = subprocess.run(
        [sys.executable, "-m", "duetime.cli.main", "tokens", "topic-key", "--tenant", "e2e"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    catalog = TopicCatalog("duetime.")
    producer = Producer({"bootstrap.servers": urls["DUETIME_KAFKA_BOOTSTRAP"]})
    for job_id, signed in (("e2e-unsigned", False), ("e2e-signed", True)):
        job = parse_job(
            {
                "id": job_id,
                "tenant": "e2e",
                "schedule": {"cron": "0 3 1 1 *"},
                "target": {"http": {"url": "https://example.com/hook"}},
                "version": 1,
            }
        )
        value, record_key = JOB_DEFINITIONS.encode(job), job_id.encode()
        headers = list(JOB_DEFINITIONS.headers())
        if signed:
            headers += signature_headers(key, "e2e", record_key, value)
        producer.produce(catalog.jobs, value, record_key, headers=headers)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": urls["DUETIME_KAFKA_BOOTSTRAP"],
            "group.id": f"e2e-guard-{os.getpid()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([catalog.jobs_rejected])
    rejected: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and not (rejected and "e2e-signed" in _job_ids(store)):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                rejected.append(msg.key().decode())
    finally:
        consumer.close()
    assert rejected == ["e2e-unsigned"], log
    assert {"e2e-signed", "e2e-unsigned"} & _job_ids(store) == {"e2e-signed"}


def _job_ids(store: Store) -> set[str]:
    return {row.job_id for row in store.jobs_list()}


def _sign_in_link(log: str) -> str:
    match = re.search(r"dashboard\.url url=(\S+)/ui/ sign_in=(\S+)", log)
    assert match is not None, log
    assert match.group(2).startswith(f"{match.group(1)}/ui/sign-in/")
    return match.group(2)


def _check_api(api_file: Path, log: str) -> None:
    """The URL printed and written, the file only the owner can read, the token valid."""
    assert api_file.stat().st_mode & 0o777 == 0o600
    access = json.loads(api_file.read_text())
    assert f"api.url url={access['url']} " in log, log
    assert re.search(rf"dashboard\.url url={re.escape(access['url'])}/ui/ sign_in=\S+", log), log
    headers = {"Authorization": f"Bearer {access['admin_token']}"}
    deadline = time.monotonic() + 30
    while True:
        try:
            whoami = httpx.get(f"{access['url']}/v1/whoami", headers=headers, timeout=5)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, log
            time.sleep(0.2)
    assert whoami.status_code == 200 and whoami.json()["admin"] is True
    dead = httpx.get(
        f"{access['url']}/v1/runs",
        params={"job_id": "demo-always-fails", "state": "dead"},
        headers=headers,
        timeout=10,
    ).json()
    assert dead["items"] and dead["items"][0]["attempt"] == 3
    # The printed link signs in (a client that keeps cookies, like a browser) and the dashboard
    # lists the dead run; the same link a second time is refused.
    link = _sign_in_link(log)
    with httpx.Client(timeout=10, follow_redirects=True) as browser:
        signed_in = browser.get(link)
        assert signed_in.status_code == 200 and "admin: every tenant" in signed_in.text
        assert str(signed_in.url) == f"{access['url']}/ui/"
        assert dead["items"][0]["run_id"] in signed_in.text
        assert browser.get(f"{access['url']}/ui/jobs").status_code == 200
    with httpx.Client(timeout=10, follow_redirects=True) as other_browser:
        again = other_browser.get(link)
        assert again.status_code == 410 and "already used" in again.text
        assert other_browser.get(f"{access['url']}/ui/", follow_redirects=False).status_code == 303
    detail = httpx.get(
        f"{access['url']}/v1/runs/{dead['items'][0]['run_id']}", headers=headers, timeout=10
    ).json()
    assert [a["status"] for a in detail["attempts"]] == ["failed", "failed", "failed"]
