"""``duetime service NAME``: run one service in the foreground.

Services are found through the ``duetime.services`` entry-point group, so the core package never
imports a service module (the import contracts check that).
"""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from typing import Any

from duetime.errors import InvalidInput

__all__ = ["available_services", "register"]


def available_services() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="duetime.services")}


def register(sub: Any) -> None:
    parser = sub.add_parser("service", help="run one service (planner, dispatcher, worker, reaper)")
    parser.add_argument("name", help="planner | dispatcher | worker | reaper")
    parser.add_argument("service_args", nargs=argparse.REMAINDER, help="options of the service")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    services = available_services()
    if args.name not in services:
        raise InvalidInput(
            "name", f"unknown service {args.name!r}; one of {', '.join(sorted(services))}"
        )
    code: int = services[args.name].load()(args.service_args)
    return code
