"""``duetime up [--demo]``: the embedded stack, migrations and all four services, supervised.

Ctrl-C stops the services (SIGTERM, then SIGKILL after a grace period) and the parts of the stack
this command started; nothing is left running.
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
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_infra import EmbeddedStack

from .demo import DemoTarget, demo_jobs
from .supervisor import Supervisor

SERVICES = ("planner", "dispatcher", "worker", "reaper")


def register(sub: Any) -> None:
    parser = sub.add_parser("up", help="start the stack and all services (Ctrl-C stops)")
    parser.add_argument("--demo", action="store_true", help="also run a demo target and jobs")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--summary-every", type=float, default=10.0, help="seconds between run summaries"
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
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    data_dir: Path = (args.data_dir or default_data_dir()).absolute()
    sup = Supervisor()
    sup.say("duetime", f"stack.starting data_dir={data_dir}")
    stack = EmbeddedStack(data_dir)
    already_up = all(s.healthy for s in stack.status())
    urls = stack.up()
    sup.say(
        "duetime",
        f"stack.ready database={urls.database_url} kafka={urls.kafka_bootstrap} "
        f"etcd={urls.etcd_endpoints}",
    )
    env = {
        **os.environ,
        "DUETIME_DATA_DIR": str(data_dir),
        "DUETIME_DATABASE_URL": urls.database_url,
        "DUETIME_KAFKA_BOOTSTRAP": urls.kafka_bootstrap,
        "DUETIME_ETCD_ENDPOINTS": urls.etcd_endpoints,
        "PYTHONUNBUFFERED": "1",
    }
    demo: DemoTarget | None = None
    store: Store | None = None
    interrupted = False
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if args.demo:
            demo = DemoTarget()
            demo.start()
            # The demo target listens on 127.0.0.1, which workers refuse unless allowed.
            env["DUETIME_ALLOW_PRIVATE_TARGETS"] = "1"
        command = [sys.executable, "-m", "duetime.cli.main", "service"]
        counts = {
            "planner": _count(args.planners, "DUETIME_PLANNERS"),
            "dispatcher": _count(args.dispatchers, "DUETIME_DISPATCHERS"),
        }
        for name in SERVICES:
            for instance in range(counts.get(name, 1)):
                label = name if instance == 0 else f"{name}-{instance}"
                extra = ["--instance", str(instance)] if name == "dispatcher" else []
                sup.add(label, [*command, name, *extra], env)
        sup.start_all()
        store = Store(urls.database_url, pool_size=1, application_name="duetime-up")
        if demo is not None:
            with store.tx() as tx:
                writes = jobs_apply(tx, demo_jobs(demo.port))
            for w in writes:
                sup.say("duetime", f"demo.job_applied job_id={w.job_id} action={w.action}")
        sup.say("duetime", "up.ready (Ctrl-C stops everything)")
        last_summary = time.monotonic()
        while True:
            time.sleep(0.5)
            sup.check()
            if args.summary_every and time.monotonic() - last_summary >= args.summary_every:
                last_summary = time.monotonic()
                _summary(sup, store)
    except KeyboardInterrupt:
        interrupted = True
        sup.say("duetime", "up.stopping")
    finally:
        # Cleanup must not be cut short: a second Ctrl-C, or the same signal forwarded again by a
        # wrapper (make, uv run), would otherwise abort it and leave processes behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sup.stop_all()
        if store is not None:
            store.close()
        if demo is not None:
            demo.stop()
        if not already_up:
            stack.down()
            sup.say("duetime", "stack.stopped")
    return 0 if interrupted else 1


def _count(requested: int | None, variable: str) -> int:
    """How many processes of a service to run: the option, else the variable, else one.

    One of each is what measured best on two cores (bench/reports/spike.md): a second
    dispatcher made a 20k spike later, not sooner, because everything shares the cores.
    """
    if requested is None:
        raw = os.environ.get(variable, "")
        requested = int(raw) if raw.isdigit() else 1
    return max(1, min(requested, 16))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _summary(sup: Supervisor, store: Store) -> None:
    try:
        rows = store.runs_list(None, 2000)
    except Exception as exc:  # the summary is informational; never let it stop the stack
        sup.say("duetime", f"summary.failed error={exc}")
        return
    counts: Counter[tuple[str, str]] = Counter((r.job_id, r.state) for r in rows)
    jobs = sorted({job for job, _ in counts})
    for job in jobs:
        states = " ".join(f"{state}={n}" for (j, state), n in sorted(counts.items()) if j == job)
        sup.say("duetime", f"runs job_id={job} {states}")
