"""The REST API under ``duetime up``: its port, its admin token, and ``<data dir>/api.json``.

``api.json`` holds ``{"url": ..., "admin_token": ...}`` with file mode 0600 (written through a
temporary file created 0600, then renamed, so the token is never readable by others, not even
for a moment). A later ``duetime up`` on the same data dir keeps the token while it is valid
(not revoked, same database) and the port while it is free, so scripts and bookmarks keep
working across restarts. The token is printed nowhere: ``duetime up`` prints the URL, the
file's path, and a one-time dashboard sign-in link made for the token once the API answers
(``sign_in_link``; ``duetime.store.sign_in_links`` has why a link and not the token).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from duetime.api_tokens import parse_token
from duetime.store import Store
from duetime.store.sign_in_links import sign_in_links_create
from duetime.store.tokens import tokens_authenticate, tokens_create
from duetime_infra.ports import find_free_port, port_is_free

from .private_file import write_private

__all__ = [
    "API_FILE",
    "DEFAULT_API_PORT",
    "ApiAccess",
    "prepare_api",
    "sign_in_link",
    "wait_for_api",
]

API_FILE = "api.json"
#: The port ``duetime up`` gives the API when it is free (else any free one).
DEFAULT_API_PORT = 8470


@dataclass(frozen=True)
class ApiAccess:
    host: str
    port: int
    admin_token: str
    file: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"ApiAccess(url={self.url!r}, file={str(self.file)!r})"


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _choose_port(host: str, requested: int | None, previous_url: str | None) -> int:
    if requested:
        return requested  # asked for: a port in use is then the API's error to report
    candidates = []
    if previous_url:
        with contextlib.suppress(ValueError):
            if (port := urlsplit(previous_url).port) is not None:
                candidates.append(port)
    candidates.append(DEFAULT_API_PORT)
    for port in candidates:
        if port_is_free(port, host):
            return port
    return find_free_port(host)


def prepare_api(
    data_dir: Path, store: Store, *, host: str = "127.0.0.1", port: int | None = None
) -> ApiAccess:
    """Pick the port, make sure of an admin token, and write ``api.json`` (mode 0600)."""
    path = data_dir / API_FILE
    previous = _read(path)
    token = previous.get("admin_token", "")
    with store.tx() as tx:
        valid = token and tokens_authenticate(tx.conn, token)
        if not valid or valid.tenant is not None:
            issued, _record = tokens_create(tx.conn, tenant=None, name="duetime up")
            token = issued.token
    access = ApiAccess(host, _choose_port(host, port, previous.get("url")), token, path)
    write_api_file(access)
    return access


def write_api_file(access: ApiAccess) -> None:
    content = {"url": access.url, "admin_token": access.admin_token}
    write_private(access.file, json.dumps(content, indent=2) + "\n")


def wait_for_api(access: ApiAccess, timeout: float, between: Callable[[], None]) -> bool:
    """Whether the API answered ``/healthz`` within ``timeout`` seconds; ``between`` runs
    between tries (the caller's stop check and service watch)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{access.url}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() >= deadline:
            return False
        between()
        time.sleep(0.2)


def sign_in_link(access: ApiAccess, store: Store) -> str:
    """A new one-time link to the dashboard for the admin token of ``api.json``: its code is
    stored hashed, works once and for 15 minutes (``duetime.store.sign_in_links``)."""
    token_id = parse_token(access.admin_token)
    if token_id is None:  # prepare_api made or checked it: cannot happen
        raise ValueError("the admin token of api.json is malformed")
    with store.tx() as tx:
        link = sign_in_links_create(tx.conn, token_id)
    return f"{access.url}/ui/sign-in/{link.code}"
