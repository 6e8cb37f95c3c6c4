"""The archive's one port: object storage. ``objects.S3ObjectStore`` is its adapter."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ObjectStore"]


class ObjectStore(Protocol):
    """What the archive needs from object storage."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, in key order."""
        ...
