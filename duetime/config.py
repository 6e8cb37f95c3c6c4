"""Settings from the environment, or from the env file the embedded stack writes.

Resolution order for each URL: the process environment (``DUETIME_DATABASE_URL``,
``DUETIME_KAFKA_BOOTSTRAP``, ``DUETIME_ETCD_ENDPOINTS``), then ``<data dir>/stack.env``, where the
data dir is ``DUETIME_DATA_DIR`` or ``.duetime`` in the current directory. That is how
``duetime jobs list`` finds the stack that ``duetime up`` started from the same directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from duetime.cold_tier import DEFAULT_HOT_HORIZON, validate_hot_horizon
from duetime.errors import ConfigError
from duetime.shard_map import ShardMap

__all__ = [
    "SHARD_MAP_KEY",
    "STACK_ENV_FILE",
    "Settings",
    "default_data_dir",
    "load_settings",
    "read_env_file",
    "write_env_file",
]

STACK_ENV_FILE = "stack.env"
_KEYS = ("DUETIME_DATABASE_URL", "DUETIME_KAFKA_BOOTSTRAP", "DUETIME_ETCD_ENDPOINTS")
SHARD_MAP_KEY = "DUETIME_SHARD_MAP"
_CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class Settings:
    """Where the shared infrastructure is, and the knobs every service reads."""

    database_url: str
    kafka_bootstrap: str
    etcd_endpoints: str = ""
    topic_prefix: str = "duetime."
    # "local" tunes Kafka clients for the embedded broker (fast joins, short fetch waits);
    # "prod" keeps client defaults that suit a real cluster.
    profile: str = "local"
    # The ``client.id`` of this process's Kafka clients: what broker logs, quotas and ACLs name.
    kafka_client_id: str = "duetime"
    data_dir: Path = field(default_factory=lambda: default_data_dir())
    # Jobs whose next run lies beyond this are kept in the cold tier (docs/planner.md); every
    # process that writes jobs (planner, API, CLI) reads it (DUETIME_HOT_HORIZON, seconds).
    hot_horizon: timedelta = DEFAULT_HOT_HORIZON
    # Several PostgreSQL clusters (duetime/shard_map.py): None = every shard in database_url.
    shard_map: ShardMap | None = None

    def clusters(self) -> ShardMap:
        """Where each shard lives: the configured map, or every shard in the one database."""
        if self.shard_map is not None:
            return self.shard_map
        return ShardMap.single(self.require_database())

    def require_database(self) -> str:
        if not self.database_url:
            raise ConfigError(
                "no database: set DUETIME_DATABASE_URL or start the stack with `duetime up`"
            )
        return self.database_url

    def require_kafka(self) -> str:
        if not self.kafka_bootstrap:
            raise ConfigError(
                "no broker: set DUETIME_KAFKA_BOOTSTRAP or start the stack with `duetime up`"
            )
        return self.kafka_bootstrap


def default_data_dir() -> Path:
    return Path(os.environ.get("DUETIME_DATA_DIR", ".duetime")).absolute()


def read_env_file(path: Path) -> dict[str, str]:
    """Parse a ``KEY=VALUE`` file (blank lines and ``#`` comments ignored)."""
    values: dict[str, str] = {}
    if not path.exists():
        return values
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Write ``values`` atomically so a reader never sees half a file, readable by its owner
    only (mode 0600): ``stack.env`` carries the embedded S3 server's secret key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{k}={v}\n" for k, v in values.items()))
    tmp.chmod(0o600)  # a leftover .tmp of this name may have been more open
    tmp.replace(path)


def load_settings(data_dir: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Build settings from ``env`` (default ``os.environ``) and the stack's env file."""
    environ = dict(os.environ if env is None else env)
    directory = data_dir or Path(environ.get("DUETIME_DATA_DIR", ".duetime")).absolute()
    from_file = read_env_file(directory / STACK_ENV_FILE)

    def pick(key: str) -> str:
        return environ.get(key) or from_file.get(key, "")

    profile = environ.get("DUETIME_PROFILE", "local")
    if profile not in ("local", "prod"):
        raise ConfigError(f"DUETIME_PROFILE must be 'local' or 'prod', not {profile!r}")
    client_id = environ.get("DUETIME_KAFKA_CLIENT_ID", "duetime")
    if not _CLIENT_ID.fullmatch(client_id):
        raise ConfigError(
            "DUETIME_KAFKA_CLIENT_ID must be 1 to 249 of the characters A-Z a-z 0-9 . _ -, "
            f"not {client_id!r}"
        )
    database_url = pick(_KEYS[0])
    shard_map = None
    if raw_map := pick(SHARD_MAP_KEY):
        shard_map = ShardMap.parse(raw_map)
        if not database_url:
            database_url = shard_map.home_url
        elif database_url != shard_map.home_url:
            raise ConfigError(
                "DUETIME_DATABASE_URL must be the cluster of shard 0 in DUETIME_SHARD_MAP "
                "(the home cluster), or be left unset"
            )
    return Settings(
        hot_horizon=_hot_horizon(environ.get("DUETIME_HOT_HORIZON", "")),
        database_url=database_url,
        shard_map=shard_map,
        kafka_bootstrap=pick(_KEYS[1]),
        etcd_endpoints=pick(_KEYS[2]),
        topic_prefix=environ.get("DUETIME_TOPIC_PREFIX", "duetime."),
        profile=profile,
        kafka_client_id=client_id,
        data_dir=directory,
    )


def _hot_horizon(raw: str) -> timedelta:
    if not raw:
        return DEFAULT_HOT_HORIZON
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigError(f"DUETIME_HOT_HORIZON must be a number of seconds, not {raw!r}") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ConfigError(f"DUETIME_HOT_HORIZON must be a number of seconds, not {raw!r}")
    return validate_hot_horizon(timedelta(seconds=seconds))
