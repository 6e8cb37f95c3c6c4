"""Creating a PostgreSQL data directory: binaries, the OS account, and a cached template.

**Running as root.** PostgreSQL refuses to run as root (``initdb``/``postgres`` exit with
"cannot be run as root"). The pgserver wheel handles that by creating a ``pgserver`` account with
``useradd`` and opening every parent directory of the data dir to everyone (``o+rx``). We do
less: run ``initdb`` and ``postgres`` as an existing unprivileged account (``DUETIME_PG_OS_USER``,
else ``postgres`` if it exists, else ``nobody``) via ``setuid`` in the child, and grant only
*search* permission (``o+x``, not listing) on the parent directories that lack it, logging each
change. pytest's temp root is ``0700``, so under pytest as root that grant is needed.

**Template.** ``initdb`` output depends only on the PostgreSQL build and our options, so the
first run saves a pristine copy under the cache dir and later runs copy it instead of running
``initdb`` again. Two workers racing to save it is harmless: the rename of a complete copy is
atomic and the loser discards its copy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from duetime.errors import StackError
from duetime.logs import event
from duetime_infra.processes import OsUser

__all__ = [
    "DB_SUPERUSER",
    "cache_root",
    "grant_traversal",
    "init_data_dir",
    "pg_bin",
    "pg_version",
    "postgres_os_user",
    "template_dir",
]

#: The database superuser initdb creates; stack URLs connect as this role.
DB_SUPERUSER = "duetime"
# Trust auth is acceptable only because the server listens on 127.0.0.1 and a socket inside the
# data dir: this is a local development stack, not a deployment recipe (see infra/README.md).
_INITDB_OPTIONS = (
    f"--username={DB_SUPERUSER}",
    "--auth=trust",
    "--encoding=UTF8",
    "--locale=C",
    "--no-instructions",
)
_FALLBACK_OS_USERS = ("postgres", "nobody")

_logger = logging.getLogger(__name__)


def pg_bin(name: str) -> Path:
    """A PostgreSQL program from the pgserver wheel (``postgres``, ``initdb``, ...).

    Located with ``find_spec`` rather than imported: importing ``pgserver`` pulls in psutil,
    platformdirs and fasteners and sets up its own server registry, none of which we use.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the pgserver package (PostgreSQL binaries) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name


@functools.cache
def pg_version() -> str:
    """The server version, e.g. ``16.2`` (keys the template cache)."""
    out = subprocess.run(
        [str(pg_bin("postgres")), "--version"], check=True, capture_output=True, text=True
    ).stdout
    return out.strip().rsplit(" ", 1)[-1]


def cache_root(env: Mapping[str, str]) -> Path:
    """``DUETIME_CACHE_DIR``, else ``$XDG_CACHE_HOME/duetime``, else ``~/.cache/duetime``."""
    if env.get("DUETIME_CACHE_DIR"):
        return Path(env["DUETIME_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "duetime"


def template_dir(env: Mapping[str, str]) -> Path:
    key = hashlib.sha256(f"{pg_version()} {' '.join(_INITDB_OPTIONS)}".encode()).hexdigest()[:8]
    return cache_root(env) / f"pg-template-{pg_version()}-{key}"


def postgres_os_user(data_dir: Path, env: Mapping[str, str]) -> OsUser | None:
    """The account to run PostgreSQL as: None unless we are root.

    An existing data directory decides (PostgreSQL must run as its owner); otherwise the first
    account that exists among ``DUETIME_PG_OS_USER``, ``postgres``, ``nobody``.
    """
    if os.geteuid() != 0:
        return None
    if (data_dir / "PG_VERSION").exists():
        owner = data_dir.stat().st_uid
        if owner != 0:
            entry = pwd.getpwuid(owner)
            return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    wanted = env.get("DUETIME_PG_OS_USER")
    for name in (wanted,) if wanted else _FALLBACK_OS_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    raise StackError(
        "running as root, and no unprivileged account to run PostgreSQL as: "
        "set DUETIME_PG_OS_USER to an existing non-root user"
    )


def grant_traversal(path: Path) -> None:
    """Let any user *search* (not list) every parent of ``path``, logging what changed."""
    for parent in reversed(path.absolute().parents):
        mode = parent.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
        event(_logger, "stack.pg_traversal_granted", path=parent)


def _chown_tree(root: Path, user: OsUser) -> None:
    os.chown(root, user.uid, user.gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(Path(dirpath) / name, user.uid, user.gid, follow_symlinks=False)


def _run_initdb(data: Path, user: OsUser | None, env: Mapping[str, str], log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        result = subprocess.run(
            [str(pg_bin("initdb")), "--pgdata", str(data), *_INITDB_OPTIONS],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data.parent,
            env={**env, "LC_ALL": "C"},
            check=False,
            user=None if user is None else user.uid,
            group=None if user is None else user.gid,
            extra_groups=None if user is None else [],
        )
    if result.returncode != 0:
        raise StackError(f"initdb failed (exit {result.returncode}); see {log_path}")


def _save_template(data: Path, template: Path) -> None:
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = template.with_name(f"{template.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(data, tmp, symlinks=True)
        tmp.rename(template)
    except OSError:
        # Another worker saved it first (the rename found a non-empty target), or the cache is
        # not writable: either way this run's data dir is fine.
        shutil.rmtree(tmp, ignore_errors=True)
        return
    event(_logger, "stack.pg_template_saved", path=template)


def init_data_dir(
    data: Path, *, user: OsUser | None, env: Mapping[str, str], log_path: Path
) -> None:
    """Create the cluster in ``data`` (which must not hold one yet) from the template or initdb."""
    template = template_dir(env)
    data.parent.mkdir(parents=True, exist_ok=True)
    if (template / "PG_VERSION").is_file():
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(template, data, symlinks=True)
        source = "template"
    else:
        data.mkdir(exist_ok=True)
        if user is not None:
            os.chown(data, user.uid, user.gid)
        data.chmod(0o700)
        _run_initdb(data, user, env, log_path)
        _save_template(data, template)
        source = "initdb"
    if user is not None:
        _chown_tree(data, user)
    data.chmod(0o700)  # PostgreSQL refuses a data dir others can read
    event(_logger, "stack.pg_data_initialised", path=data, source=source)
