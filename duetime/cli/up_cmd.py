"""`duetime up` (placeholder until implemented)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("up", help="not implemented yet")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    raise SystemExit("duetime up: not implemented yet")
