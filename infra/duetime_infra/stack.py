"""The embedded stack: PostgreSQL, a Kafka-protocol broker, etcd and an S3 server on loopback.

``up()`` is idempotent: servers that already run (found through ``stack.json`` and verified by
pid *and* start time) are reused, stale records from a crash are dropped, and only what is
missing is started. All missing servers are spawned first and waited on together, so the slow
ones overlap. Any component can be an external server instead: when its URL is set in the
environment (``DUETIME_DATABASE_URL``, ``DUETIME_KAFKA_BOOTSTRAP``, ``DUETIME_ETCD_ENDPOINTS``,
``DUETIME_S3_ENDPOINT``), it is health-checked and passed through, never started or stopped.

Several PostgreSQL clusters (``pg_clusters=N``): N servers, ``postgres``, ``postgres-2``, ...,
each with its own port, data, log and pid record, all migrated; ``stack.env`` then also holds
``DUETIME_SHARD_MAP`` placing the shards evenly on them (``ShardMap.even``), and
``DUETIME_DATABASE_URL`` is the first (the home cluster). The number of clusters of a data dir is
fixed once it holds their data: jobs live in their shard's cluster, so ``up`` with another N is
refused rather than moving shards silently. External clusters: ``DUETIME_SHARD_MAP`` in the
environment names them (checked healthy, migrated, passed through), as ``DUETIME_DATABASE_URL``
names one.

Files under the data dir: ``stack.json`` (pids, ports), ``stack.env`` (the URLs, read by
``duetime.config.load_settings``), ``logs/<component>.log``, ``postgres/`` (``postgres-2/``...),
``etcd/``, ``s3/``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from duetime.config import SHARD_MAP_KEY, STACK_ENV_FILE, write_env_file
from duetime.errors import ConfigError, DuetimeError, StackError
from duetime.logs import event
from duetime.shard_map import ShardMap
from duetime_infra.component import DEFAULT_START_TIMEOUT, Component
from duetime_infra.etcd import EtcdServer
from duetime_infra.health import probe_etcd, probe_kafka, probe_postgres, probe_s3
from duetime_infra.kafka import KafkaBroker
from duetime_infra.ports import find_free_port, port_is_free
from duetime_infra.postgres import PostgresServer, cluster_name, has_cluster_data
from duetime_infra.processes import is_running
from duetime_infra.seaweed import SeaweedS3
from duetime_infra.state import ComponentRecord, StateFile

__all__ = [
    "COMPONENTS",
    "ENV_KEYS",
    "MAX_PG_CLUSTERS",
    "S3_CLIENT_KEYS",
    "ComponentStatus",
    "EmbeddedStack",
    "StackUrls",
]

COMPONENTS = ("postgres", "kafka", "etcd", "s3")
#: The environment variable that points each component at an external server.
ENV_KEYS = {
    "postgres": "DUETIME_DATABASE_URL",
    "kafka": "DUETIME_KAFKA_BOOTSTRAP",
    "etcd": "DUETIME_ETCD_ENDPOINTS",
    "s3": "DUETIME_S3_ENDPOINT",
}
#: The most PostgreSQL clusters one embedded stack runs (``pg_clusters``).
MAX_PG_CLUSTERS = 8
#: What an S3 client needs besides the endpoint; passed through from the environment for an
#: external endpoint, the embedded server's own for the embedded one.
S3_CLIENT_KEYS = ("DUETIME_S3_BUCKET", "DUETIME_S3_ACCESS_KEY_ID", "DUETIME_S3_SECRET_ACCESS_KEY")
_PROBES: dict[str, Callable[[str, float], bool]] = {
    "postgres": probe_postgres,
    "kafka": probe_kafka,
    "etcd": probe_etcd,
    "s3": probe_s3,
}
_EXTERNAL_WAIT = 10.0
# Where the store's ``apply_migrations(database_url) -> list[str]`` may live, first match wins.
_C = TypeVar("_C", bound=Component)

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackUrls:
    """Where each component listens; empty for a component the stack does not include."""

    database_url: str
    kafka_bootstrap: str
    etcd_endpoints: str
    s3_endpoint: str = ""
    #: ``S3_CLIENT_KEYS`` -> value: the bucket and the key pair that go with ``s3_endpoint``.
    s3_client: Mapping[str, str] = field(default_factory=dict)
    #: ``DUETIME_SHARD_MAP`` with several clusters (``database_url`` is then the home one).
    shard_map: str = ""

    def clusters(self) -> ShardMap:
        """The PostgreSQL clusters: the shard map, or every shard in ``database_url``."""
        if self.shard_map:
            return ShardMap.parse(self.shard_map)
        return ShardMap.single(self.database_url)

    def as_env(self) -> dict[str, str]:
        """The non-empty URLs under their ``DUETIME_*`` names, as ``stack.env`` holds them."""
        values = {
            ENV_KEYS["postgres"]: self.database_url,
            SHARD_MAP_KEY: self.shard_map,
            ENV_KEYS["kafka"]: self.kafka_bootstrap,
            ENV_KEYS["etcd"]: self.etcd_endpoints,
            ENV_KEYS["s3"]: self.s3_endpoint,
        }
        if self.s3_endpoint:
            values.update(self.s3_client)
        return {key: value for key, value in values.items() if value}


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    url: str
    pid: int | None  # None for an external server or one that is not running
    healthy: bool
    external: bool


class EmbeddedStack:
    """Start, reuse, check and stop the stack kept in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        components: Collection[str] = COMPONENTS,
        env: Mapping[str, str] | None = None,
        migrate: bool = True,
        durable: bool = True,
        postgres_settings: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        die_with_owner: bool = False,
        pg_clusters: int | None = None,
    ) -> None:
        """Args:
        data_dir: where pids, ports, logs and server data live (created if missing).
        components: which of ``COMPONENTS`` this stack manages or checks.
        env: environment to read external URLs from and to pass to servers (``os.environ``).
        migrate: apply the schema migrations after PostgreSQL is up.
        durable: False trades crash safety for speed (no fsync in PostgreSQL and etcd); for
            test sessions, whose data is thrown away anyway.
        postgres_settings: extra PostgreSQL server settings (``-c name=value``).
        start_timeout: seconds each server may take to become healthy.
        die_with_owner: servers this object starts are stopped by the kernel when the thread
            that started them exits, however the process ends (Linux); for ``duetime up`` and
            test sessions. ``duetime stack up`` leaves it off: its servers outlive the command.
            Servers found running are reused as they are.
        pg_clusters: how many PostgreSQL clusters to run (1 to ``MAX_PG_CLUSTERS``); None =
            as many as the data dir holds, else one. ``up`` refuses a number other than the
            data dir's: the shard map of existing data does not change silently.
        """
        unknown = set(components) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown stack components: {sorted(unknown)}")
        self.data_dir = Path(data_dir).absolute()
        if pg_clusters is not None and not 1 <= pg_clusters <= MAX_PG_CLUSTERS:
            raise ConfigError(
                f"the number of PostgreSQL clusters must be 1 to {MAX_PG_CLUSTERS}, "
                f"not {pg_clusters}"
            )
        self.components = tuple(name for name in COMPONENTS if name in components)
        self._env = dict(os.environ if env is None else env)
        self._migrate = migrate
        self._durable = durable
        self._postgres_settings = dict(postgres_settings or {})
        self._start_timeout = start_timeout
        self._die_with_owner = die_with_owner
        self._state = StateFile(self.data_dir)
        self._external_map: ShardMap | None = None
        self._external: dict[str, str] = {}
        if "postgres" in self.components:
            self._external = self._external_clusters(pg_clusters)
        self._external.update(
            (name, self._env[ENV_KEYS[name]])
            for name in self.components
            if name != "postgres" and self._env.get(ENV_KEYS[name])
        )
        records = self._state.load()
        #: The clusters ``up`` runs; ``down`` and ``status`` also see any more the dir records.
        self.pg_clusters = pg_clusters or self._existing_clusters(records) or 1
        self._components: dict[str, Component] = {
            name: self._make(name, records.get(name))
            for name in self._names(records)
            if name not in self._external
        }

    # Component objects -----------------------------------------------------------------

    @property
    def postgres(self) -> PostgresServer:
        return self._typed("postgres", PostgresServer)

    @property
    def kafka(self) -> KafkaBroker:
        return self._typed("kafka", KafkaBroker)

    @property
    def etcd(self) -> EtcdServer:
        return self._typed("etcd", EtcdServer)

    @property
    def s3(self) -> SeaweedS3:
        return self._typed("s3", SeaweedS3)

    @property
    def clusters(self) -> list[PostgresServer]:
        """The embedded PostgreSQL servers ``up`` runs, the home cluster first."""
        return [
            self._typed(cluster_name(k), PostgresServer) for k in range(1, self.pg_clusters + 1)
        ]

    def _typed(self, name: str, kind: type[_C]) -> _C:
        component = self._components.get(name)
        if not isinstance(component, kind):
            raise StackError(f"{name} is not managed by this stack (external or not included)")
        return component

    def _names(self, records: Mapping[str, ComponentRecord]) -> list[str]:
        """The components this object handles, PostgreSQL clusters first (home first).

        Beyond the ``pg_clusters`` that ``up`` runs, every cluster the data dir records, so
        that ``down`` stops and ``status`` shows all of them.
        """
        names: list[str] = []
        if "postgres" in self.components:
            recorded = [k for k in range(1, MAX_PG_CLUSTERS + 1) if cluster_name(k) in records]
            external = sum(1 for name in self._external if _kind(name) == "postgres")
            count = max(self.pg_clusters, external, *recorded)
            names = [cluster_name(k) for k in range(1, count + 1)]
        return names + [name for name in self.components if name != "postgres"]

    def _wanted(self) -> list[str]:
        """The components ``up`` makes healthy: the first ``pg_clusters`` clusters, the rest."""
        extra = {cluster_name(k) for k in range(self.pg_clusters + 1, MAX_PG_CLUSTERS + 1)}
        return [name for name in self._names({}) if name not in extra]

    def _existing_clusters(self, records: Mapping[str, ComponentRecord]) -> int:
        """How many clusters the data dir holds: the highest with data or a live server."""
        found = 0
        for k in range(1, MAX_PG_CLUSTERS + 1):
            record = records.get(cluster_name(k))
            live = record is not None and record.process is not None and is_running(record.process)
            if live or has_cluster_data(self.data_dir, k):
                found = k
        return found

    def _external_clusters(self, pg_clusters: int | None) -> dict[str, str]:
        """External PostgreSQL: the clusters of ``DUETIME_SHARD_MAP`` (home first), or the one
        ``DUETIME_DATABASE_URL``; none when neither is set."""
        urls: list[str] = []
        raw_map = self._env.get(SHARD_MAP_KEY, "")
        database_url = self._env.get(ENV_KEYS["postgres"], "")
        if raw_map:
            self._external_map = shard_map = ShardMap.parse(raw_map)
            if database_url and database_url != shard_map.home_url:
                raise ConfigError(
                    f"{ENV_KEYS['postgres']} must be the cluster of shard 0 in {SHARD_MAP_KEY} "
                    "(the home cluster), or be left unset"
                )
            home = shard_map.home_url
            urls = [home, *(url for url in shard_map.urls if url != home)]
        elif database_url:
            urls = [database_url]
        if urls and pg_clusters is not None and pg_clusters != len(urls):
            raise ConfigError(
                f"{pg_clusters} PostgreSQL cluster(s) asked for, but PostgreSQL is external "
                f"here: {SHARD_MAP_KEY if raw_map else ENV_KEYS['postgres']} names {len(urls)}"
            )
        return {cluster_name(k): url for k, url in enumerate(urls, start=1)}

    def _make(self, name: str, record: ComponentRecord | None) -> Component:
        """Build the component object, reusing the recorded ports (and process, if alive)."""
        alive = record is not None and record.process is not None and is_running(record.process)
        if record is not None and record.process is not None and not alive:
            event(_logger, "stack.stale_record", component=name, pid=record.process.pid)

        def port(recorded: int | None) -> int:
            if recorded is not None and (alive or port_is_free(recorded)):
                return recorded
            return find_free_port()

        main_port = port(None if record is None else record.port)
        aux = {} if record is None else dict(record.aux_ports)
        component: Component
        if _kind(name) == "postgres":
            component = PostgresServer(
                self.data_dir,
                port=main_port,
                cluster=_cluster_number(name),
                durable=self._durable,
                settings=self._postgres_settings,
                env=self._env,
                on_change=self._on_change,
                die_with_owner=self._die_with_owner,
            )
        elif name == "kafka":
            component = KafkaBroker(
                self.data_dir,
                port=main_port,
                env=self._env,
                on_change=self._on_change,
                die_with_owner=self._die_with_owner,
            )
        elif name == "s3":
            component = SeaweedS3(
                self.data_dir,
                port=main_port,
                aux_ports=_s3_aux_ports(aux, alive, port),
                env=self._env,
                on_change=self._on_change,
                die_with_owner=self._die_with_owner,
            )
        else:
            component = EtcdServer(
                self.data_dir,
                port=main_port,
                peer_port=port(aux.get("peer")),
                durable=self._durable,
                env=self._env,
                on_change=self._on_change,
                die_with_owner=self._die_with_owner,
            )
        if alive and record is not None and record.process is not None:
            component.adopt(record.process)
        return component

    def _refresh(self) -> None:
        """Pick up servers another process started since this object was made."""
        records = self._state.load()
        for name, component in list(self._components.items()):
            record = records.get(name)
            if component.running() or record is None or record.process is None:
                continue
            if is_running(record.process):
                self._components[name] = self._make(name, record)

    def _on_change(self, _component: Component) -> None:
        self._persist()

    def _persist(self) -> None:
        records = self._state.load()
        wanted = set(self._wanted())
        for name, url in self._external.items():
            records[name] = ComponentRecord(url=url, external=True)
        for name, component in self._components.items():
            on_disk = records.get(name)
            if (
                component.record is None
                and on_disk is not None
                and on_disk.process is not None
                and is_running(on_disk.process)
            ):
                # A live server another stack object started: not ours to forget.
                continue
            if on_disk is not None and on_disk.external and name not in wanted:
                # An external cluster an earlier ``up`` recorded, beyond those this one runs:
                # its record stays, so ``status`` still shows where it is.
                continue
            records[name] = ComponentRecord(
                url=component.url,
                port=component.port,
                aux_ports=component.aux_ports(),
                process=component.record,
            )
        self._state.save(records)

    # Public operations -----------------------------------------------------------------

    def urls(self) -> StackUrls:
        """The URLs clients should use (external ones as given)."""

        def url(name: str) -> str:
            if name in self._external:
                return self._external[name]
            if name in self._components:
                return self._components[name].url
            return self._env.get(ENV_KEYS[_kind(name)], "")

        s3_client: dict[str, str] = {}
        s3 = self._components.get("s3")
        if isinstance(s3, SeaweedS3):
            s3_client = s3.client_env()
        elif "s3" in self._external:
            s3_client = {key: self._env[key] for key in S3_CLIENT_KEYS if self._env.get(key)}
        shard_map = ""
        if self._external_map is not None:
            shard_map = self._external_map.render()
        elif "postgres" in self.components and self.pg_clusters > 1:
            clusters = [url(cluster_name(k)) for k in range(1, self.pg_clusters + 1)]
            shard_map = ShardMap.even(clusters).render()
        return StackUrls(
            url("postgres"), url("kafka"), url("etcd"), url("s3"), s3_client, shard_map
        )

    def up(self) -> StackUrls:
        """Make every component healthy, apply migrations, write ``stack.env``; idempotent."""
        began = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._state.locked():
            self._check_cluster_count()
            self._refresh()
            for name, url in self._external.items():
                self._check_external(name, url)
            self._start_managed()
            self._persist()
            urls = self.urls()
            if self._migrate and "postgres" in self.components:
                for database_url in urls.clusters().urls:
                    self._apply_migrations(database_url)
            write_env_file(self.data_dir / STACK_ENV_FILE, urls.as_env())
        event(
            _logger,
            "stack.up",
            data_dir=self.data_dir,
            elapsed_s=f"{time.monotonic() - began:.2f}",
        )
        return urls

    def _check_cluster_count(self) -> None:
        """Refuse to run another number of clusters than the data dir holds data for."""
        if "postgres" in self._external:
            return
        existing = self._existing_clusters(self._state.load())
        if existing and existing != self.pg_clusters:
            raise StackError(
                f"the stack in {self.data_dir} has {existing} PostgreSQL cluster(s), and its jobs "
                f"are placed on them by shard; bring it up with --pg-clusters {existing}, or "
                f"remove {self.data_dir} (its data is lost) to start afresh with "
                f"{self.pg_clusters}"
            )

    def _start_managed(self) -> None:
        spawned: list[Component] = []
        waiting: list[Component] = []
        wanted = [self._components[n] for n in self._wanted() if n in self._components]
        try:
            for component in wanted:
                if component.running():
                    if component.healthy():
                        event(
                            _logger,
                            "stack.component_reused",
                            component=component.name,
                            pid=component.pid,
                        )
                        continue
                    waiting.append(component)  # alive but not answering yet (e.g. recovery)
                    continue
                component.spawn()
                spawned.append(component)
                waiting.append(component)
            for component in waiting:
                component.wait_healthy(self._start_timeout)
        except BaseException:
            # Leave nothing half-started behind; what already ran before this call stays up.
            for component in reversed(spawned):
                component.stop()
            raise

    def _check_external(self, name: str, url: str) -> None:
        kind = _kind(name)
        key = SHARD_MAP_KEY if kind == "postgres" and self._external_map else ENV_KEYS[kind]
        deadline = time.monotonic() + min(self._start_timeout, _EXTERNAL_WAIT)
        while not _PROBES[kind](url, 2.0):
            if time.monotonic() >= deadline:
                raise StackError(f"external {name} at {url} ({key}) is not healthy")
            time.sleep(0.2)
        event(_logger, "stack.external_used", component=name, url=url)

    def _apply_migrations(self, database_url: str) -> None:
        # Imported here: starting a stack without migrating must not pay for SQLAlchemy.
        from duetime.store.migrate import apply_migrations

        try:
            applied = apply_migrations(database_url)
        except DuetimeError:
            raise
        except Exception as exc:
            raise StackError(f"applying migrations failed: {exc}") from exc
        event(
            _logger,
            "stack.migrations_applied",
            database=_without_password(database_url),
            count=len(applied),
            versions=",".join(applied) or "-",
        )

    def down(self) -> None:
        """Stop every server this stack started (by verified pid); idempotent."""
        began = time.monotonic()
        with self._state.locked():
            self._refresh()
            for component in reversed(self._components.values()):
                component.stop()
            self._persist()
            (self.data_dir / STACK_ENV_FILE).unlink(missing_ok=True)
        event(
            _logger,
            "stack.down",
            data_dir=self.data_dir,
            elapsed_s=f"{time.monotonic() - began:.2f}",
        )

    def status(self) -> list[ComponentStatus]:
        """Each component's pid, URL and a live health probe."""
        self._refresh()
        records = self._state.load()
        statuses = []
        for name in self._names(records):
            record = records.get(name)
            external_url = self._external.get(name)
            managed = self._components.get(name)
            if (
                external_url is None
                and record is not None
                and record.external
                and (managed is None or not managed.running())
            ):
                # Brought up against an external server from a shell with the URL set.
                external_url = record.url
            if external_url is not None or managed is None:
                url = external_url or ""
                healthy = bool(url) and _PROBES[_kind(name)](url, 2.0)
                statuses.append(ComponentStatus(name, url, None, healthy, True))
                continue
            # A component never started here has no URL yet: its port is only a candidate.
            url = managed.url if record is not None or managed.running() else ""
            statuses.append(ComponentStatus(name, url, managed.pid, managed.healthy(), False))
        return statuses


def _kind(name: str) -> str:
    """The kind of a component: ``postgres`` for every cluster (``postgres-2``...)."""
    return "postgres" if name.startswith("postgres") else name


def _cluster_number(name: str) -> int:
    """1 for ``postgres``, k for ``postgres-k``."""
    return int(name.rpartition("-")[2]) if "-" in name else 1


def _without_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _s3_aux_ports(
    recorded: Mapping[str, int], alive: bool, port: Callable[[int | None], int]
) -> dict[str, int]:
    """The recorded ports of ``weed mini`` that can be used again; the admin port only with its
    ``+ 10000`` partner (``duetime_infra.seaweed``), else it is picked afresh."""
    ports = {key: port(value) for key, value in recorded.items() if key != "admin"}
    admin = recorded.get("admin")
    if admin is not None and (
        alive or (port_is_free(admin) and port_is_free(admin + SeaweedS3.ADMIN_GRPC_OFFSET))
    ):
        ports["admin"] = admin
    return ports
