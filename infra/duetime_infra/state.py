"""``<data dir>/stack.json``: which servers the embedded stack started, on which ports.

The file is what lets ``duetime stack down`` in one shell stop what ``duetime stack up`` started in
another. A component's ports stay in the file after it stops, so the next ``up`` reuses them and
the URLs in ``stack.env`` do not change between restarts. Writers hold ``stack.lock`` (``flock``)
so two ``up`` runs on one directory cannot both start a PostgreSQL on the same data.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duetime.logs import event
from duetime_infra.processes import ProcessRecord

__all__ = ["STATE_FILE", "ComponentRecord", "StateFile"]

STATE_FILE = "stack.json"
_LOCK_FILE = "stack.lock"
_FORMAT_VERSION = 1

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComponentRecord:
    """The last known state of one component."""

    url: str
    external: bool = False
    port: int | None = None
    aux_ports: Mapping[str, int] = field(default_factory=dict)
    process: ProcessRecord | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "external": self.external,
            "port": self.port,
            "aux_ports": dict(self.aux_ports),
            "process": None if self.process is None else self.process.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ComponentRecord:
        process = data.get("process")
        port = data.get("port")
        return cls(
            url=str(data.get("url", "")),
            external=bool(data.get("external", False)),
            port=None if port is None else int(port),
            aux_ports={str(k): int(v) for k, v in dict(data.get("aux_ports") or {}).items()},
            process=None if process is None else ProcessRecord.from_json(process),
        )


class StateFile:
    """Read and write ``stack.json`` atomically, under an exclusive lock for changes."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATE_FILE
        self._lock_path = data_dir / _LOCK_FILE

    def load(self) -> dict[str, ComponentRecord]:
        """Return the records by component name; an unreadable file is set aside, not fatal.

        A corrupt file only loses pids; the servers it named are then found by their lock
        files and ports, which is better than refusing to start.
        """
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            components = raw["components"]
            return {str(name): ComponentRecord.from_json(data) for name, data in components.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path.with_suffix(".json.corrupt")
            self.path.replace(aside)
            event(_logger, "stack.state_corrupt", logging.WARNING, path=aside, error=repr(exc))
            return {}

    def save(self, records: Mapping[str, ComponentRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "version": _FORMAT_VERSION,
            "components": {name: record.to_json() for name, record in records.items()},
        }
        tmp = self.path.with_suffix(f".json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's lock: one ``up`` or ``down`` at a time per data dir."""
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
