"""The ``duetime`` command: one parser, sub-commands contributed by the modules of this package.

Exit codes: 0 success, 1 a runtime failure, 2 bad input (with a one-line message naming the
field), 3 the job or run does not exist.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from duetime.errors import DuetimeError, InvalidInput, NotFound

__all__ = ["main"]

# Each module exposes ``register(subparsers)``; the handler it sets as ``func`` returns an
# exit code.
_COMMAND_MODULES = (
    "duetime.cli.stack_cmd",
    "duetime.cli.migrate_cmd",
    "duetime.cli.schedule_cmd",
    "duetime.cli.jobs_cmd",
    "duetime.cli.runs_cmd",
    "duetime.cli.targets_cmd",
    "duetime.cli.tenants_cmd",
    "duetime.cli.alerts_cmd",
    "duetime.cli.tokens_cmd",
    "duetime.cli.shards_cmd",
    "duetime.cli.replay_cmd",
    "duetime.cli.archive_cmd",
    "duetime.cli.service_cmd",
    "duetime.cli.up_cmd",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line and exit code 2, like every other input error.
        self.exit(2, f"duetime: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="duetime", description="duetime: a distributed job scheduler")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except InvalidInput as exc:
        print(f"duetime: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except NotFound as exc:
        print(f"duetime: {_one_line(exc)}", file=sys.stderr)
        return 3
    except DuetimeError as exc:
        print(f"duetime: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def _one_line(exc: BaseException) -> str:
    """An error in one line: drivers' messages (psycopg's) can span several."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())


if __name__ == "__main__":
    raise SystemExit(main())
