"""``duetime up [--demo]``: the embedded stack, migrations, the four services and the API.

Ctrl-C, SIGTERM or SIGHUP, once or any number of times, stops the services (SIGTERM, then SIGKILL
after a grace period) and the parts of the stack this command started; nothing is left running.
If the command itself is killed (SIGKILL, a crash), what it started stops by itself: services
and servers get a signal from the kernel when it dies (``duetime.lifetime``). And whatever a run
that died still left in the data dir is stopped by the next ``duetime up`` there (``up_record``).
docs/operations.md tells the whole story.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from duetime.config import default_data_dir
from duetime.jobs_guard import SECRET_ENV
from duetime.metrics import METRICS_HOST_ENV, METRICS_PORT_ENV
from duetime.store import Store
from duetime.store.clusters import ClusterStores
from duetime.store.fanout import merge_runs_list
from duetime_infra import EmbeddedStack, StackUrls
from duetime_infra.ports import LOOPBACK, port_is_free
from duetime_infra.processes import child_record

from .demo import DemoTarget, PipelineJoined, demo_jobs_apply
from .stack_cmd import add_pg_clusters_option
from .supervisor import STOP_GRACE, Supervisor
from .topic_secret import ensure_topic_secret
from .up_api import DEFAULT_API_PORT, ApiAccess, prepare_api, sign_in_link, wait_for_api
from .up_record import UpClaim, UpRecord, stop_services

SERVICES = ("planner", "dispatcher", "worker", "reaper", "api")
# The services that serve /metrics (docs/metrics.md), each process on a port of its own.
METRICS_SERVICES = ("planner", "dispatcher", "worker", "reaper", "api")
METRICS_BASE_ENV = "DUETIME_METRICS_PORT_BASE"
# The services given the jobs-topic guard's secret (only the planners read the topic; nothing
# up starts produces to it: the API, the CLI and the demo write jobs to PostgreSQL directly).
GUARDED_SERVICES = ("planner",)
DEFAULT_METRICS_BASE = 9470
# How long up waits for the API to answer before printing the sign-in link anyway.
_API_READY_TIMEOUT = 60.0
# How often the main loop looks for a stop request and for services that died.
_POLL_INTERVAL = 0.2
# How long up --demo waits for a dispatcher and a worker to consume before applying the jobs.
_DEMO_JOIN_TIMEOUT = 60.0


def register(sub: Any) -> None:
    parser = sub.add_parser("up", help="start the stack and all services (Ctrl-C stops)")
    parser.add_argument("--demo", action="store_true", help="also run a demo target and jobs")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--summary-every", type=float, default=10.0, help="seconds between run summaries"
    )
    parser.add_argument(
        "--api-port",
        type=int,
        default=None,
        help=f"port of the REST API (env DUETIME_API_PORT; default: the last one, else "
        f"{DEFAULT_API_PORT}, else any free one)",
    )
    parser.add_argument(
        "--planners",
        type=int,
        default=None,
        help="planner processes competing for due jobs (env DUETIME_PLANNERS, default 1)",
    )
    parser.add_argument(
        "--dispatchers",
        type=int,
        default=None,
        help="dispatcher processes sharing the due topics (env DUETIME_DISPATCHERS, default 1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="first port of the services' /metrics endpoints, one port each from there "
        f"(env {METRICS_BASE_ENV}, default {DEFAULT_METRICS_BASE}; 0 turns them off)",
    )
    add_pg_clusters_option(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    # First of all: from here on a stop signal is a request, never the end of the process.
    signals = _StopSignals()
    signals.install()
    data_dir: Path = (args.data_dir or default_data_dir()).absolute()
    claim: UpClaim | None = None
    stack: EmbeddedStack | None = None
    owns_stack = False
    demo: DemoTarget | None = None
    clusters: ClusterStores | None = None
    # The callback reads claim and owns_stack when a service starts, after they are set below.
    joined = PipelineJoined()
    sup = Supervisor(
        on_started=lambda _spec: _record(claim, owns_stack, sup), on_line=joined.observe
    )
    try:
        claim = UpClaim.acquire(data_dir)
        if claim.previous is not None:
            _clear_stale(claim.previous, data_dir, sup)
        signals.raise_if_requested()
        sup.say("duetime", f"stack.starting data_dir={data_dir}")
        stack = EmbeddedStack(data_dir, die_with_owner=True, pg_clusters=args.pg_clusters)
        owns_stack = not all(s.healthy for s in stack.status())
        _record(claim, owns_stack, sup)  # before starting: a crash mid-start is cleared too
        urls = stack.up()
        sup.say(
            "duetime",
            f"stack.ready database={urls.database_url} kafka={urls.kafka_bootstrap} "
            f"etcd={urls.etcd_endpoints} s3={urls.s3_endpoint or '-'}",
        )
        signals.raise_if_requested()
        demo, clusters, api = _start_services(args, sup, data_dir, urls)
        _say_sign_in_link(sup, api, clusters.home, signals)
        if demo is not None:
            _apply_demo(sup, clusters, demo.port, joined, signals)
        sup.say("duetime", "up.ready (Ctrl-C stops everything)")
        last_summary = time.monotonic()
        while True:
            signals.raise_if_requested()
            time.sleep(_POLL_INTERVAL)
            sup.check()
            if args.summary_every and time.monotonic() - last_summary >= args.summary_every:
                last_summary = time.monotonic()
                _summary(sup, clusters)
    except _StopRequested:
        sup.say("duetime", "up.stopping")
    except Exception as exc:
        if not signals.received:
            raise
        # The stop signal sent to the process group also reached a helper the start was
        # waiting on (``postgres --version``, initdb): the start failed because we are
        # stopping, which is what was asked. Clean up as for any stop.
        sup.say("duetime", f"up.stopping start_interrupted={type(exc).__name__}")
    finally:
        sup.stop_all()
        if clusters is not None:
            clusters.close()
        if demo is not None:
            demo.stop()
        if stack is not None and owns_stack:
            stack.down()
            sup.say("duetime", "stack.stopped")
        if claim is not None:
            claim.release()
        if signals.received:
            sup.say("duetime", f"up.stopped signals={signals.received}")
        signals.ignore_from_now_on()
    return 0


def _start_services(
    args: argparse.Namespace, sup: Supervisor, data_dir: Path, urls: StackUrls
) -> tuple[DemoTarget | None, ClusterStores, ApiAccess]:
    """Start the demo target (if asked) and the services; the stores of the stack's shard map
    (``--pg-clusters``, or an external map)."""
    env = {
        **os.environ,
        "DUETIME_DATA_DIR": str(data_dir),
        "DUETIME_DATABASE_URL": urls.database_url,
        "DUETIME_KAFKA_BOOTSTRAP": urls.kafka_bootstrap,
        "DUETIME_ETCD_ENDPOINTS": urls.etcd_endpoints,
        "PYTHONUNBUFFERED": "1",
    }
    demo: DemoTarget | None = None
    if args.demo:
        demo = DemoTarget()
        demo.start()
        # The demo target listens on 127.0.0.1, which workers refuse unless allowed.
        env["DUETIME_ALLOW_PRIVATE_TARGETS"] = "1"
    command = [sys.executable, "-m", "duetime.cli.main", "service"]
    api = _prepare_api(args, data_dir, urls)
    # The jobs-topic guard is on: only records signed with a tenant's key are ingested.
    guarded = {SECRET_ENV: ensure_topic_secret(env, data_dir)}
    counts = {
        "planner": _count(args.planners, "DUETIME_PLANNERS"),
        "dispatcher": _count(args.dispatchers, "DUETIME_DISPATCHERS"),
    }
    ports = _MetricsPorts(args.metrics_port)
    for name in SERVICES:
        for instance in range(counts.get(name, 1)):
            label = name if instance == 0 else f"{name}-{instance}"
            extra = ["--instance", str(instance)] if name == "dispatcher" else []
            if name == "api":
                extra = ["--host", api.host, "--port", str(api.port)]
            metrics = ports.env_for(label) if name in METRICS_SERVICES else {}
            guard = guarded if name in GUARDED_SERVICES else {}
            sup.add(label, [*command, name, *extra], {**env, **metrics, **guard})
    for label, url in ports.urls.items():
        sup.say("duetime", f"metrics.url name={label} url={url}")
    sup.start_all()
    sup.say("duetime", f"api.url url={api.url} admin_token_file={api.file}")
    clusters = ClusterStores(urls.clusters(), pool_size=1, application_name="duetime-up")
    return demo, clusters, api


def _apply_demo(
    sup: Supervisor,
    clusters: ClusterStores,
    port: int,
    joined: PipelineJoined,
    signals: _StopSignals,
) -> None:
    """Apply the demo jobs, each to its shard's cluster, once a dispatcher and a worker
    consume (``PipelineJoined``), or after ``_DEMO_JOIN_TIMEOUT`` s anyway; a stop asked for
    meanwhile is honoured at once."""
    deadline = time.monotonic() + _DEMO_JOIN_TIMEOUT
    while not joined.ready.wait(_POLL_INTERVAL):
        signals.raise_if_requested()
        sup.check()
        if time.monotonic() >= deadline:
            sup.say("duetime", f"demo.consumers_not_seen waited_s={_DEMO_JOIN_TIMEOUT:g}")
            break
    for w in demo_jobs_apply(clusters, port):
        sup.say("duetime", f"demo.job_applied job_id={w.job_id} action={w.action}")


def _say_sign_in_link(sup: Supervisor, api: ApiAccess, store: Store, signals: _StopSignals) -> None:
    """Print the dashboard's URL with a one-time sign-in link, once the API answers.

    The admin token stays off the terminal (a terminal's output ends up in logs): the link signs
    in once, within 15 minutes (docs/dashboard.md). It is made when the API answers, so the 15
    minutes start when it can be used; a stop asked for meanwhile is honoured at once."""

    def between_tries() -> None:
        signals.raise_if_requested()
        sup.check()

    ready = wait_for_api(api, _API_READY_TIMEOUT, between_tries)
    if not ready:
        sup.say("duetime", f"api.not_ready_yet timeout_s={_API_READY_TIMEOUT:g}")
    sup.say("duetime", f"dashboard.url url={api.url}/ui/ sign_in={sign_in_link(api, store)}")


class _MetricsPorts:
    """One ``/metrics`` port per service process, counting up from the base and skipping ports
    in use, so several dispatchers or planners never collide; the base 0 turns them off."""

    def __init__(self, requested: int | None) -> None:
        if requested is None:
            raw = os.environ.get(METRICS_BASE_ENV, "")
            requested = int(raw) if raw.isdigit() else DEFAULT_METRICS_BASE
        self._next = requested
        self.urls: dict[str, str] = {}

    def env_for(self, label: str) -> dict[str, str]:
        if not self._next:
            return {METRICS_PORT_ENV: "0"}
        while not port_is_free(self._next) and self._next < 65535:
            self._next += 1
        port, self._next = self._next, self._next + 1
        self.urls[label] = f"http://{LOOPBACK}:{port}/metrics"
        return {METRICS_PORT_ENV: str(port), METRICS_HOST_ENV: LOOPBACK}


def _prepare_api(args: argparse.Namespace, data_dir: Path, urls: StackUrls) -> ApiAccess:
    """The API's port and admin token, written to ``<data dir>/api.json`` (``up_api``)."""
    raw = os.environ.get("DUETIME_API_PORT", "")
    port = args.api_port if args.api_port is not None else (int(raw) if raw.isdigit() else None)
    store = Store(urls.database_url, pool_size=1, application_name="duetime-up")
    try:
        return prepare_api(data_dir, store, port=port)
    finally:
        store.close()


class _StopRequested(Exception):
    """A stop signal arrived; raised by ``_StopSignals.raise_if_requested``, never by a handler."""


class _StopSignals:
    """SIGINT, SIGTERM and SIGHUP as one stop request, whatever number of them arrives.

    The handler only counts: the main thread looks at the count between steps (at least every
    ``_POLL_INTERVAL`` once the services run; a stop asked for while the stack starts waits for
    that start). A handler that raised instead could stop the clean-up itself half-way, or have
    its exception swallowed where Python cannot propagate one (an at-fork hook of ``logging``
    did exactly that, and the stop request was lost). The handlers stay installed until the
    process exits, so a repeated signal (``make`` and ``uv run`` forward the one a terminal,
    ``timeout``, systemd or a container runtime sends to the whole process group) never finds
    the default action, which would end the process mid-clean-up. A signal the process inherited
    as ignored (SIGINT in a background job, SIGHUP under nohup) stays ignored.
    """

    def __init__(self) -> None:
        self.received = 0

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self._on_signal)

    def raise_if_requested(self) -> None:
        if self.received:
            raise _StopRequested

    def _on_signal(self, signum: int, frame: object) -> None:
        self.received += 1

    def ignore_from_now_on(self) -> None:
        """Everything is stopped: a signal still on its way (the group's second copy) must not
        end the process now. Python puts the default action back for the handlers it installed
        while the interpreter shuts down, which would make a clean stop exit by SIGTERM; an
        ignored signal stays ignored."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)


def _record(claim: UpClaim | None, owns_stack: bool, sup: Supervisor) -> None:
    """Write ``up.json``: the services that run now, and whether this run owns the stack."""
    if claim is None:
        return
    services = {
        spec.name: child_record(spec.process.pid, spec.argv)
        for spec in sup.services
        if spec.process is not None
    }
    claim.save(owns_stack, services)


def _clear_stale(previous: UpRecord, data_dir: Path, sup: Supervisor) -> None:
    """Stop what a ``duetime up`` that died without cleaning up left in ``data_dir``."""
    sup.say("duetime", f"up.stale_run_found supervisor_pid={previous.supervisor_pid}")
    stopped = stop_services(previous.services, STOP_GRACE)
    if stopped:
        sup.say("duetime", f"up.stale_services_stopped names={','.join(stopped)}")
    if previous.owns_stack:
        stale = EmbeddedStack(data_dir)
        running = [s.name for s in stale.status() if s.pid is not None]
        if running:
            stale.down()
            sup.say("duetime", f"up.stale_stack_stopped components={','.join(running)}")


def _count(requested: int | None, variable: str) -> int:
    """How many processes of a service to run: the option, else the variable, else one.

    One of each is what measured best on two cores (bench/reports/spike.md): a second
    dispatcher made a 20k spike later, not sooner, because everything shares the cores.
    """
    if requested is None:
        raw = os.environ.get(variable, "")
        requested = int(raw) if raw.isdigit() else 1
    return max(1, min(requested, 16))


def runs_summary(clusters: ClusterStores, limit: int = 2000) -> list[str]:
    """``job_id=J state=n ...`` per job, over the newest ``limit`` runs of every cluster."""
    parts = [store.runs_list(None, limit) for store in clusters]
    with clusters.home.tx() as tx:
        rows = merge_runs_list(tx.conn, parts, limit)
    counts: Counter[tuple[str, str]] = Counter((r.job_id, r.state) for r in rows)
    jobs = sorted({job for job, _ in counts})
    return [
        f"job_id={job} "
        + " ".join(f"{state}={n}" for (j, state), n in sorted(counts.items()) if j == job)
        for job in jobs
    ]


def _summary(sup: Supervisor, clusters: ClusterStores) -> None:
    try:
        lines = runs_summary(clusters)
    except Exception as exc:  # the summary is informational; never let it stop the stack
        sup.say("duetime", f"summary.failed error={exc}")
        return
    for line in lines:
        sup.say("duetime", f"runs {line}")
