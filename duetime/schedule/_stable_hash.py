"""The one stable hash used for window offsets and retry jitter.

Python's ``hash()`` is salted per process, so it cannot place a job at the same point of its
window on every planner. This hash is reproducible in any language: the first 8 bytes of the
SHA-256 digest of the UTF-8 text, read as a big-endian unsigned 64-bit integer.
"""

from __future__ import annotations

import hashlib

__all__ = ["stable_hash64"]


def stable_hash64(text: str) -> int:
    """Return the first 8 bytes of SHA-256(UTF-8 ``text``) as a big-endian unsigned integer."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big")
