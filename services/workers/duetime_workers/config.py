"""The worker's settings: a frozen config with defaults, validation, and the environment names.

Environment (command-line options override them):

========================================  ==============================================
``DUETIME_WORKER_ID``                     worker name in leases and logs (hostname-pid)
``DUETIME_WORKER_CONCURRENCY``            execution slots per process (256)
``DUETIME_WORKER_PROCESSES``              worker processes (one per CPU core)
``DUETIME_ALLOW_PRIVATE_TARGETS``         ``1`` lets HTTP targets reach private addresses
``DUETIME_WORKER_SHUTDOWN_GRACE``         seconds in-flight attempts get at shutdown (10)
``DUETIME_WORKER_MAX_AHEAD``              runs claimed ahead held per process (20000)
``DUETIME_SECRETS_DIR``                   directory of secret files for header references
``DUETIME_SECRET_<NAME>``                 a secret's value, when no file holds it
========================================  ==============================================
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from duetime.errors import ConfigError

__all__ = ["GROUP_ID", "WorkerConfig", "default_worker_id", "user_agent"]

# The consumer group, after the topic prefix ("duetime.workers" by default), like the planner's
# and the dispatcher's groups: deployments (and tests) with their own prefix never share a group.
GROUP_ID = "workers"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def user_agent() -> str:
    try:
        release = version("duetime")
    except PackageNotFoundError:
        release = "0+unknown"
    return f"duetime-worker/{release}"


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the worker service needs besides the shared infrastructure settings.

    Attributes:
        worker_id: Recorded on leases and attempts; unique per process.
        concurrency: Attempts executing at once in one process; the consumer takes no more than
            this. Claims, completions and renewals are batched, so slots cost no connections:
            a slot is an asyncio task and, for HTTP targets, at most one pooled connection.
        allow_private_targets: Let HTTP targets reach loopback/private/link-local addresses.
            Off in production (SSRF); the local demo turns it on for its 127.0.0.1 target.
        shutdown_grace: How long in-flight attempts may run after SIGTERM before they are
            handed back (cancelled, and their runs due again at once); zero hands them back
            at once. 5 s, so that the hand-back lands within the 10 s ``duetime up`` gives a
            service after SIGTERM.
        db_call_timeout: Client-side deadline for a claim or completion statement. A silent
            network partition raises nothing, so every database call needs one. A completion
            gets less when less is left on its lease.
        claim_give_up: How long a claim is retried through database errors before the record
            is committed past anyway (the planner's sweeper re-publishes unclaimed runs).
        poll_timeout: How long one consumer poll waits for records.
        group_id: The consumer group all workers share, after the topic prefix.
        secrets_dir: Where the files of secret header values are (``<dir>/<name>``); the
            environment (``DUETIME_SECRET_<NAME>``) is looked at when no file holds a secret.
        secret_cache_ttl: How long a secret's value is reused before its file is read again
            (a rotated file is in use within this time).
        max_ahead: Runs released ahead of their due instant (docs/claim-ahead.md) that one
            process claims and holds until due without taking an execution slot. Beyond it, a
            run released ahead waits in a slot. At a due instant up to ``concurrency +
            max_ahead`` attempts of a process start together; HTTP connections stay capped
            at ``concurrency`` per process.
    """

    worker_id: str = field(default_factory=default_worker_id)
    concurrency: int = 256
    allow_private_targets: bool = False
    shutdown_grace: timedelta = timedelta(seconds=5)
    db_call_timeout: timedelta = timedelta(seconds=10)
    claim_give_up: timedelta = timedelta(seconds=60)
    poll_timeout: timedelta = timedelta(milliseconds=200)
    group_id: str = GROUP_ID
    user_agent: str = field(default_factory=user_agent)
    secrets_dir: Path | None = None
    secret_cache_ttl: timedelta = timedelta(seconds=5)
    max_ahead: int = 20_000

    def __post_init__(self) -> None:
        if not self.worker_id or len(self.worker_id) > 200:
            raise ConfigError("worker id must be 1-200 characters")
        if not 1 <= self.concurrency <= 1024:
            raise ConfigError(f"concurrency must be between 1 and 1024, not {self.concurrency}")
        if not 0 <= self.max_ahead <= 1_000_000:
            raise ConfigError(f"max_ahead must be between 0 and 1000000, not {self.max_ahead}")
        for name in (
            "shutdown_grace",
            "db_call_timeout",
            "claim_give_up",
            "poll_timeout",
            "secret_cache_ttl",
        ):
            if getattr(self, name) < timedelta(0):
                raise ConfigError(f"{name} must not be negative")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerConfig:
        env = os.environ if environ is None else environ
        config = cls()
        if env.get("DUETIME_WORKER_ID"):
            config = replace(config, worker_id=env["DUETIME_WORKER_ID"])
        if env.get("DUETIME_WORKER_CONCURRENCY"):
            config = replace(config, concurrency=_int("DUETIME_WORKER_CONCURRENCY", env))
        if env.get("DUETIME_WORKER_SHUTDOWN_GRACE"):
            config = replace(
                config,
                shutdown_grace=timedelta(seconds=_float("DUETIME_WORKER_SHUTDOWN_GRACE", env)),
            )
        if env.get("DUETIME_WORKER_MAX_AHEAD"):
            config = replace(config, max_ahead=_int("DUETIME_WORKER_MAX_AHEAD", env))
        if env.get("DUETIME_SECRETS_DIR"):
            config = replace(config, secrets_dir=Path(env["DUETIME_SECRETS_DIR"]))
        return replace(config, allow_private_targets=_flag("DUETIME_ALLOW_PRIVATE_TARGETS", env))


def _flag(name: str, env: Mapping[str, str]) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0, not {value!r}")


def _int(name: str, env: Mapping[str, str]) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {env[name]!r}") from None


def _float(name: str, env: Mapping[str, str]) -> float:
    try:
        return float(env[name])
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {env[name]!r}") from None
