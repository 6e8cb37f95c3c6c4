"""The embedded stack on real servers: it serves, is idempotent and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import aetcd
import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.cli.main import main
from duetime.config import read_env_file
from duetime.errors import StackError
from duetime_infra import (
    EmbeddedStack,
    KafkaBroker,
    PostgresServer,
    StackUrls,
    find_free_port,
)
from duetime_infra.ports import port_is_free
from duetime_infra.postgres import workload_settings
from duetime_infra.stack import S3_CLIENT_KEYS
from tests.fixtures.s3 import S3Server

pytestmark = pytest.mark.integration

# Consumer settings of the local profile (duetime/bus/kafka.py).
_CONSUMER = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 50,
    "enable.auto.commit": False,
}
_PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}


def _alive(pid: int) -> bool:
    """A process that has not fully exited (a zombie with no threads left counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        threads = sum(1 for _ in Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX" or threads > 1


def _children(pid: int) -> list[int]:
    """Live children of ``pid`` (a PostgreSQL postmaster's backends and workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] not in "ZX":
            found.append(int(entry.name))
    return found


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _pids(stack: EmbeddedStack) -> dict[str, int]:
    pids = {s.name: s.pid for s in stack.status()}
    assert all(pid is not None for pid in pids.values()), pids
    return {name: pid for name, pid in pids.items() if pid is not None}


def _kafka_round_trip(bootstrap: str) -> None:
    topic = f"stack-test-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER})
    producer.produce(topic, key=b"k", value=b"hello", partition=1)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", **_CONSUMER})
    # assign() rather than subscribe(): no group join, so no 3 s wait on tansu.
    consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
    try:
        message = None
        for _ in range(100):
            message = consumer.poll(0.1)
            if message is not None:
                break
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"k", b"hello")
    finally:
        consumer.close()


def test_session_stack_serves_postgres_kafka_and_etcd(stack: StackUrls) -> None:
    with psycopg.connect(stack.database_url) as conn:
        assert conn.execute("select current_database(), 1").fetchone() == ("duetime", 1)
    _kafka_round_trip(stack.kafka_bootstrap)


async def test_session_etcd_put_get(stack: StackUrls) -> None:
    endpoint = urlsplit(stack.etcd_endpoints.split(",")[0])
    async with aetcd.Client(endpoint.hostname, endpoint.port, timeout=5) as client:
        key = f"/duetime-test/{uuid.uuid4().hex}".encode()
        await client.put(key, b"v1")
        got = await client.get(key)
        assert got is not None and got.value == b"v1"


def test_up_twice_is_a_noop_and_down_stops_every_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    first = EmbeddedStack(data_dir, migrate=False, durable=False)
    try:
        urls = first.up()
        pids = _pids(first)
        assert all(s.healthy for s in first.status())
        assert read_env_file(data_dir / "stack.env") == urls.as_env()
        backends = _children(pids["postgres"])
        assert backends  # checkpointer, walwriter, ...: they must stop too

        # A second object on the same dir (as another `duetime stack up` would) reuses it all.
        second = EmbeddedStack(data_dir, migrate=False, durable=False)
        assert second.up() == urls
        assert _pids(second) == pids

        second.down()
        assert _wait_gone([*pids.values(), *backends], timeout=0) == []
        assert all(not s.healthy and s.pid is None for s in second.status())
        assert not (data_dir / "stack.env").exists()
        second.down()  # already down: no-op
    finally:
        first.down()


def test_stale_state_from_a_crash_is_cleaned_up(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    crashed = EmbeddedStack(data_dir, migrate=False, durable=False)
    try:
        urls = crashed.up()
        old = _pids(crashed)
        backends = _children(old["postgres"])
        for pid in old.values():  # a crash: stack.json still names these pids
            os.kill(pid, signal.SIGKILL)
        for component in (crashed.postgres, crashed.kafka, crashed.etcd):
            while component.running():  # reap our children
                time.sleep(0.01)

        fresh = EmbeddedStack(data_dir, migrate=False, durable=False)
        assert not any(s.healthy for s in fresh.status())
        assert fresh.up() == urls  # same ports, so the same URLs
        new = _pids(fresh)
        assert set(new.values()).isdisjoint(old.values())
        assert all(s.healthy for s in fresh.status())
        fresh.down()
        assert _wait_gone([*new.values(), *backends], timeout=0) == []
    finally:
        crashed.down()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_servers_die_with_an_owner_killed_by_sigkill(tmp_path: Path) -> None:
    """``die_with_owner``: a process that started the stack and is then SIGKILLed (so it cleans
    nothing up) takes every server with it, PostgreSQL's backends included."""
    data_dir = tmp_path / "stack"
    script = (
        "import sys, time\n"
        "from duetime_infra import EmbeddedStack\n"
        "EmbeddedStack(sys.argv[1], migrate=False, durable=False, die_with_owner=True).up()\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "up\n"
        servers = _pids(EmbeddedStack(data_dir, migrate=False))
        pids = [*servers.values(), *_children(servers["postgres"])]
        owner.kill()
        owner.wait()
        assert _wait_gone(pids, timeout=15.0) == []
    finally:
        owner.kill()
        owner.wait()
        EmbeddedStack(data_dir, migrate=False).down()


def test_down_never_signals_a_process_that_reused_a_recorded_pid(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stack = EmbeddedStack(data_dir, components=("kafka",), migrate=False)
        stack.up()
        state = json.loads((data_dir / "stack.json").read_text())
        process = state["components"]["kafka"]["process"]
        os.killpg(process["pid"], signal.SIGKILL)
        stack.kafka.running()  # reap
        process["pid"] = stranger.pid  # the pid now belongs to someone else
        (data_dir / "stack.json").write_text(json.dumps(state))

        EmbeddedStack(data_dir, components=("kafka",)).down()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_external_urls_are_checked_and_used_not_started(
    tmp_path: Path, stack: StackUrls, s3_server: S3Server
) -> None:
    data_dir = tmp_path / "external"
    s3_env = s3_server.env()
    expected = replace(
        stack,
        s3_endpoint=s3_server.endpoint,
        s3_client={k: s3_env[k] for k in S3_CLIENT_KEYS},
    )
    external = EmbeddedStack(data_dir, env={**os.environ, **expected.as_env()}, migrate=False)
    assert external.up() == expected
    statuses = external.status()
    assert [s.name for s in statuses] == ["postgres", "kafka", "etcd", "s3"]
    assert all(s.external and s.healthy and s.pid is None for s in statuses)
    assert read_env_file(data_dir / "stack.env") == expected.as_env()
    assert not (data_dir / "logs").exists()  # nothing was started
    external.down()
    with psycopg.connect(stack.database_url) as conn:  # and nothing was stopped
        conn.execute("select 1")


def test_s3_server_listens_on_loopback_only_on_the_ports_it_was_given(
    s3_server: S3Server,
) -> None:
    """``weed mini`` opens a dozen ports; every one is set on its command line, on 127.0.0.1."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    listening = {line.split()[3] for line in out.splitlines() if f"pid={s3_server.pid}," in line}
    assert len(listening) >= 10
    assert all(address.startswith("127.0.0.1:") for address in listening), listening
    argv = Path(f"/proc/{s3_server.pid}/cmdline").read_bytes().decode().split("\0")
    given = {arg.rsplit("=", 1)[1] for arg in argv if ".port" in arg and "=" in arg}
    assert {address.rsplit(":", 1)[1] for address in listening} <= given


def test_unreachable_external_server_fails_up(tmp_path: Path) -> None:
    env = {**os.environ, "DUETIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{find_free_port()}"}
    stack = EmbeddedStack(tmp_path, components=("kafka",), env=env, start_timeout=0.3)
    with pytest.raises(StackError, match="DUETIME_KAFKA_BOOTSTRAP"):
        stack.up()


def test_killed_broker_restarts_on_the_same_port(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path)
    try:
        broker.start()
        url, pid = broker.url, broker.pid
        assert pid is not None
        broker.kill()
        assert not _alive(pid)
        assert not broker.healthy()
        broker.start()
        assert broker.url == url and broker.pid != pid
        _kafka_round_trip(broker.url)
    finally:
        broker.stop()
    assert port_is_free(broker.port)


def test_postgres_runs_with_the_workload_settings_and_the_operators_overrides(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DUETIME_POSTGRES_SETTINGS": "max_wal_size=2GB,work_mem=8MB"}
    server = PostgresServer(tmp_path, env=env)
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:

            def show(name: str) -> str:
                row = conn.execute(f"show {name}").fetchone()
                assert row is not None
                return str(row[0])

            assert show("checkpoint_timeout") == "15min"
            assert show("max_wal_size") == "2GB"  # the override wins over the default 4GB
            assert show("work_mem") == "8MB"
            buffers = conn.execute(
                "select setting::bigint * 8 / 1024 from pg_settings where name = 'shared_buffers'"
            ).fetchone()
            assert buffers is not None
            assert f"{buffers[0]}MB" == workload_settings()["shared_buffers"]
    finally:
        server.stop()


def test_killed_postgres_restarts_with_its_data(tmp_path: Path) -> None:
    server = PostgresServer(tmp_path)
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("create table kept (v int); insert into kept values (42)")
        server.kill()
        server.start()  # crash recovery replays the WAL
        with psycopg.connect(server.url) as conn:
            assert conn.execute("select v from kept").fetchone() == (42,)
    finally:
        server.stop()
    assert not (server.pgdata / "postmaster.pid").exists()


def test_cli_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(tmp_path / "cli")
    assert main(["stack", "status", "--data-dir", data_dir]) == 1
    try:
        assert main(["stack", "up", "--data-dir", data_dir]) == 0
        printed = capsys.readouterr().out
        env = read_env_file(Path(data_dir) / "stack.env")
        assert set(env) == {
            "DUETIME_DATABASE_URL",
            "DUETIME_KAFKA_BOOTSTRAP",
            "DUETIME_ETCD_ENDPOINTS",
            "DUETIME_S3_ENDPOINT",
            "DUETIME_S3_BUCKET",
            "DUETIME_S3_ACCESS_KEY_ID",
            "DUETIME_S3_SECRET_ACCESS_KEY",
        }
        assert all(f"{key}={value}" in printed for key, value in env.items())
        # The S3 server serves its bucket to a client configured from stack.env alone.
        s3 = S3ObjectStore(S3Settings.require(env={}, data_dir=Path(data_dir)))
        s3.put("probe/object", b"archived")
        assert s3.get("probe/object") == b"archived"
        assert main(["stack", "status", "--data-dir", data_dir]) == 0
        assert "yes" in capsys.readouterr().out
        assert main(["stack", "up", "--data-dir", data_dir, "--no-migrate"]) == 0
    finally:
        assert main(["stack", "down", "--data-dir", data_dir]) == 0
    assert main(["stack", "down", "--data-dir", data_dir]) == 0
    assert main(["stack", "status", "--data-dir", data_dir]) == 1


def test_s3_that_lost_a_port_between_pick_and_bind_starts_again_on_fresh_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """weed binds a dozen ports picked free beforehand; another process took one in between."""
    import socket

    from duetime_infra.seaweed import SeaweedS3

    taken: list[socket.socket] = []
    prepare = SeaweedS3._prepare

    def prepare_then_lose_a_port(self: SeaweedS3) -> None:
        prepare(self)
        if not taken:  # the first start only: its iceberg port goes to someone else
            holder = socket.socket()
            holder.bind(("127.0.0.1", self.aux_ports()["iceberg"]))
            holder.listen()
            taken.append(holder)

    monkeypatch.setattr(SeaweedS3, "_prepare", prepare_then_lose_a_port)
    server = SeaweedS3(tmp_path, port=find_free_port(), die_with_owner=True)
    lost = taken_port = None
    try:
        server.start()
        lost = taken[0].getsockname()[1]
        taken_port = server.aux_ports()["iceberg"]
        assert server.running()
    finally:
        server.stop()
        for holder in taken:
            holder.close()
    assert lost is not None and taken_port != lost
