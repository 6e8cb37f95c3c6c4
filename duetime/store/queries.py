"""Load the named SQL blocks of duetime/store/sql/*.sql as SQLAlchemy ``text()`` clauses."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlalchemy import TextClause, text

__all__ = ["load_queries", "query"]

_SQL_DIR = Path(__file__).parent / "sql"
_NAME = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$")


def _blocks(source: str) -> list[tuple[str, str]]:
    """Split a file into (name, body) blocks; comment lines are dropped (no binds in them)."""
    blocks: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        match = _NAME.match(line.strip())
        if match:
            blocks.append((match.group(1), []))
        elif blocks and not line.lstrip().startswith("--"):
            blocks[-1][1].append(line)
    return [(name, "\n".join(lines).strip().rstrip(";")) for name, lines in blocks]


@cache
def load_queries() -> dict[str, TextClause]:
    queries: dict[str, TextClause] = {}
    for path in sorted(_SQL_DIR.glob("*.sql")):
        for name, body in _blocks(path.read_text(encoding="utf-8")):
            if name in queries:
                raise ValueError(f"query {name!r} defined twice")
            queries[name] = text(body)
    return queries


def query(name: str) -> TextClause:
    return load_queries()[name]
