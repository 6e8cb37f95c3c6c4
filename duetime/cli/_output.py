"""Rendering rows for people (aligned columns) and for programs (JSON)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["iso", "print_json", "print_table"]


def iso(value: datetime | None) -> str | None:
    """UTC ISO-8601 with a ``Z``; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def print_json(rows: Sequence[dict[str, Any]]) -> None:
    print(json.dumps([{k: _plain(v) for k, v in row.items()} for row in rows], indent=2))


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    cells = [
        [("" if row.get(c) is None else str(_plain(row.get(c)))) for c in columns] for row in rows
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
