"""``duetime service NAME``: run one service in the foreground.

Services are found through the ``duetime.services`` entry-point group, so the core package never
imports a service module (the import contracts check that).

Started by ``duetime up`` (``DUETIME_SUPERVISOR_PID`` set), the service stops when its supervisor
dies, however it dies: it gets SIGTERM from the kernel and, if its clean stop hangs, kills its own
process group ``STOP_GRACE`` seconds later (``duetime.lifetime.watch_parent``).
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import entry_points
from typing import Any

from duetime.errors import InvalidInput
from duetime.lifetime import watch_parent

from .supervisor import STOP_GRACE, SUPERVISOR_PID_ENV

__all__ = ["available_services", "register"]


def available_services() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="duetime.services")}


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "service", help="run one service (planner, dispatcher, worker, reaper, api)"
    )
    parser.add_argument("name", help="planner | dispatcher | worker | reaper | api")
    parser.add_argument("service_args", nargs=argparse.REMAINDER, help="options of the service")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    services = available_services()
    if args.name not in services:
        raise InvalidInput(
            "name", f"unknown service {args.name!r}; one of {', '.join(sorted(services))}"
        )
    # Popped, so that processes the service starts (worker processes) do not take it as theirs.
    supervisor = os.environ.pop(SUPERVISOR_PID_ENV, "")
    if supervisor.isdigit():
        watch_parent(int(supervisor), STOP_GRACE, args.name)
    code: int = services[args.name].load()(args.service_args)
    return code
