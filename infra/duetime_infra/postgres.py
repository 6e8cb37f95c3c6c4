"""PostgreSQL 16 from the pgserver wheel, data under ``<data dir>/postgres``.

A stack with several clusters runs one server per cluster: cluster ``k`` (from 1) is the
component ``postgres`` for ``k = 1`` and ``postgres-k`` after it, with its files under
``<data dir>/<name>`` and its output in ``logs/<name>.log``.

The postmaster is run directly (not through ``pg_ctl``) so the pid we record is the server's own
and its output goes to ``logs/postgres.log``. It listens on ``127.0.0.1:<port>`` and on a unix
socket inside the data dir (never ``/var/run/postgresql``, which may not exist or belong to a
system server). Stopping sends SIGINT, PostgreSQL's "fast" shutdown: open transactions are rolled
back and a checkpoint is written, so the next start needs no recovery.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from duetime.errors import StackError
from duetime.logs import event
from duetime_infra.component import Component
from duetime_infra.health import probe_postgres
from duetime_infra.pg_cluster import (
    DB_SUPERUSER,
    grant_traversal,
    init_data_dir,
    pg_bin,
    postgres_os_user,
)
from duetime_infra.ports import LOOPBACK
from duetime_infra.processes import (
    OsUser,
    is_running,
    processes_in_dir,
    program_names,
    send_signal,
    wait_exit,
)

__all__ = [
    "DEFAULT_DATABASE",
    "SETTINGS_ENV",
    "PostgresServer",
    "cluster_name",
    "has_cluster_data",
    "parse_settings",
    "workload_settings",
]

DEFAULT_DATABASE = "duetime"
# sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
# Settings that trade crash safety for speed; for test sessions only.
# How long backends of a crashed postmaster get to notice and exit before they are killed.
_ORPHAN_GRACE = 5.0
_NON_DURABLE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
# A scheduler writes every run more than once (its insert, its result) and moves every due job:
# at a steady 8,000 runs/s that was ~17 MB of WAL a second. PostgreSQL's stock
# max_wal_size (1 GB) then forces a checkpoint about once a minute, and the first change of each
# page after a checkpoint writes the whole page to the WAL again; its stock shared_buffers
# (128 MB) holds less than a minute of a day's runs partition. infra/README.md has the figures.
_MAX_WAL_SIZE = "4GB"
_CHECKPOINT_TIMEOUT = "15min"
_SHARED_BUFFERS_MIN_MB = 128
_SHARED_BUFFERS_MAX_MB = 2048
# The environment variable whose ``name=value,name=value`` settings override every default here.
SETTINGS_ENV = "DUETIME_POSTGRES_SETTINGS"

_logger = logging.getLogger(__name__)


def workload_settings(memory_bytes: int | None = None) -> dict[str, str]:
    """The server settings every embedded cluster starts with: shared_buffers an eighth of the
    machine's memory (128 MB to 2 GB), checkpoints at most every 15 minutes or 4 GB of WAL."""
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    buffers_mb = min(
        max(memory_bytes // 8 // 2**20, _SHARED_BUFFERS_MIN_MB), _SHARED_BUFFERS_MAX_MB
    )
    return {
        "shared_buffers": f"{buffers_mb}MB",
        "max_wal_size": _MAX_WAL_SIZE,
        "checkpoint_timeout": _CHECKPOINT_TIMEOUT,
    }


def parse_settings(text: str) -> dict[str, str]:
    """``name=value,name=value`` (DUETIME_POSTGRES_SETTINGS) as a dict; blanks are ignored.

    Raises StackError naming the entry that is not ``name=value``: a typo must not start the
    server with a default the operator meant to replace.
    """
    settings: dict[str, str] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        name, sep, value = entry.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise StackError(
                f"{SETTINGS_ENV}: {entry.strip()!r} is not name=value "
                "(example: shared_buffers=4GB,max_wal_size=16GB)"
            )
        settings[name.strip()] = value.strip()
    return settings


def cluster_name(cluster: int) -> str:
    """The component name of cluster ``cluster`` (from 1): ``postgres``, ``postgres-2``, ..."""
    return "postgres" if cluster == 1 else f"postgres-{cluster}"


def has_cluster_data(data_dir: Path, cluster: int) -> bool:
    """Whether the stack in ``data_dir`` has initialised cluster ``cluster``'s data."""
    return (Path(data_dir).absolute() / cluster_name(cluster) / "data" / "PG_VERSION").is_file()


class PostgresServer(Component):
    """One PostgreSQL cluster with the database ``database`` created on first start."""

    name = "postgres"
    # SIGINT = fast shutdown; SIGQUIT = immediate shutdown (crash recovery on next start).
    stop_steps: ClassVar[tuple[tuple[signal.Signals, float], ...]] = (
        (signal.SIGINT, 15.0),
        (signal.SIGQUIT, 5.0),
    )
    # Fast shutdown too when its owner dies: its clients are going, and it ends in a checkpoint.
    parent_death_signal: ClassVar[signal.Signals] = signal.SIGINT

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        cluster: int = 1,
        database: str = DEFAULT_DATABASE,
        durable: bool = True,
        settings: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        on_change: Callable[[Component], None] | None = None,
        die_with_owner: bool = False,
    ) -> None:
        """Args beyond Component's:
        cluster: which of the stack's clusters (from 1); names its component and directory.
        database: created on first start; the URL points at it.
        durable: False turns off fsync, synchronous_commit and full_page_writes (tests only).
        settings: extra ``-c name=value`` server settings, e.g. ``{"max_connections": "200"}``.
            Precedence, lowest first: workload_settings(), the non-durable ones, the environment's
            DUETIME_POSTGRES_SETTINGS, then these.
        """
        super().__init__(
            data_dir, port=port, env=env, on_change=on_change, die_with_owner=die_with_owner
        )
        self.name = cluster_name(cluster)
        self.cluster = cluster
        self.database = database
        self._settings = {
            **workload_settings(),
            **({} if durable else _NON_DURABLE),
            **parse_settings(self._env.get(SETTINGS_ENV, "")),
            **(settings or {}),
        }
        self._os_user: OsUser | None = None

    @property
    def pg_dir(self) -> Path:
        return self.data_dir / self.name

    @property
    def pgdata(self) -> Path:
        return self.pg_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.pg_dir / "socket"

    @property
    def url(self) -> str:
        return f"postgresql://{DB_SUPERUSER}@{LOOPBACK}:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        """The ``postgres`` maintenance database, which exists before ``database`` does."""
        return f"postgresql://{DB_SUPERUSER}@{LOOPBACK}:{self.port}/postgres"

    def argv(self) -> list[str]:
        socket_dir = str(self.socket_dir)
        if len(f"{socket_dir}/.s.PGSQL.{self.port}") > _MAX_SOCKET_PATH:
            # TCP still works; only local tools that default to the socket lose it.
            event(_logger, "stack.pg_socket_disabled", reason="path_too_long", path=socket_dir)
            socket_dir = ""
        settings = {
            "listen_addresses": LOOPBACK,
            "port": str(self.port),
            "unix_socket_directories": socket_dir,
            **self._settings,
        }
        argv = [str(pg_bin("postgres")), "-D", str(self.pgdata)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    def _prepare(self) -> None:
        self.pg_dir.mkdir(parents=True, exist_ok=True)
        self._os_user = user = postgres_os_user(self.pgdata, self._env)
        if user is not None:
            grant_traversal(self.pgdata)
            grant_traversal(pg_bin("postgres"))
        if not (self.pgdata / "PG_VERSION").is_file():
            init_data_dir(self.pgdata, user=user, env=self._env, log_path=self.log_path)
        self._remove_stale_pid_file()
        self.socket_dir.mkdir(exist_ok=True)
        if user is not None:
            os.chown(self.socket_dir, user.uid, user.gid)
        self.socket_dir.chmod(0o700)

    def _remove_stale_pid_file(self) -> None:
        """Clear what a crashed server left: its ``postmaster.pid`` and orphaned backends.

        PostgreSQL removes the file itself when the pid is gone, but refuses to start while any
        live process holds that pid (after a reboot it may be any program), and while backends
        of the dead postmaster still hold its shared memory. Those backends exit by themselves
        once they notice the postmaster died; we give them a moment, then kill them.
        """
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            cmdline = []
        is_postgres = bool(cmdline) and Path(cmdline[0].decode(errors="replace")).name == "postgres"
        if is_postgres and str(self.pgdata).encode() in cmdline:
            raise StackError(
                f"a PostgreSQL (pid {pid}) runs on {self.pgdata} but is not recorded in "
                f"stack.json; stop it with `kill -INT {pid}` and retry"
            )
        self._reap_orphans()
        pid_file.unlink(missing_ok=True)
        event(_logger, "stack.pg_stale_pid_file_removed", path=pid_file, pid=pid)

    def _reap_orphans(self) -> None:
        deadline = time.monotonic() + _ORPHAN_GRACE
        # Only PostgreSQL programs: a shell someone left in the data dir is not ours to kill.
        orphans = [
            o for o in processes_in_dir(self.pgdata) if "postgres" in program_names(o.argv[0])
        ]
        while orphans and time.monotonic() < deadline:
            time.sleep(0.05)
            orphans = [o for o in orphans if is_running(o)]
        for orphan in orphans:
            send_signal(orphan, signal.SIGKILL)
            wait_exit(orphan, 5.0)
        if orphans:
            event(_logger, "stack.pg_orphans_killed", count=len(orphans))

    def _run_as(self) -> OsUser | None:
        return self._os_user

    def _cwd(self) -> Path | None:
        # A directory the unprivileged account can enter (not root's home, say).
        return self.pg_dir

    def probe(self, timeout: float = 2.0) -> bool:
        return probe_postgres(self.admin_url, timeout)

    def healthy(self) -> bool:
        return self.running() and probe_postgres(self.url)

    def _after_ready(self) -> None:
        import psycopg
        from psycopg import sql

        try:
            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
                found = conn.execute(
                    "select 1 from pg_database where datname = %s", (self.database,)
                ).fetchone()
                if found is None:
                    conn.execute(
                        sql.SQL("create database {}").format(sql.Identifier(self.database))
                    )
                    event(_logger, "stack.pg_database_created", database=self.database)
        except psycopg.Error as exc:
            raise StackError(f"postgres: cannot create database {self.database}: {exc}") from exc
