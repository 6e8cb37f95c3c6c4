"""Writing a file only its owner may read (mode 0600), for the secrets ``duetime up`` keeps in the
data dir (``api.json``, the jobs-topic secret).

The file is written through a temporary file created 0600 and then renamed, so its content is
never readable by others, not even for a moment, and a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["write_private"]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (its directory made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.chmod(0o600)  # whatever the umask did
    tmp.replace(path)
