"""Secret header values, resolved by the worker at call time (docs/targets.md, "Secrets").

A job header may name a secret (``SecretRef``) instead of holding a credential: the database and
every topic carry the name only, and the worker that makes the call looks the value up, in this
order:

1. the file ``<secrets dir>/<name>`` (``DUETIME_SECRETS_DIR``), when a directory is configured and
   the file exists. Files come first because they can be rotated without restarting the worker
   (a Kubernetes secret volume, Docker secrets, systemd credentials);
2. the environment variable ``DUETIME_SECRET_<NAME>`` (``duetime.credentials.secret_env_name``).

A value is kept for ``cache_ttl`` (5 s by default), so a spike of runs that share a secret reads
its file once, and a rotated file is in use within that time; a secret that was not found is not
remembered, so one added by the operator is used by the next attempt. One trailing line break is
dropped from a file (``echo token > file`` writes one). A file writable by every user is refused:
whoever can rewrite it chooses the credential the worker sends.

Every error names the secret and where the worker looked, never the value: the message becomes the
attempt's error in ``runs.last_error``, ``run_attempts``, ``runs.results`` and the logs.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from pathlib import Path

from duetime.credentials import (
    MAX_SECRET_BYTES,
    SECRET_ENV_PREFIX,
    SECRET_NAME_PATTERN,
    secret_env_name,
    unusable_secret_value,
)
from duetime.errors import ConfigError
from duetime.model import HeaderValue, SecretRef

__all__ = ["REDACTED", "SecretStore", "SecretUnavailable", "check_secrets_dir", "redact"]

REDACTED = "[secret]"


class SecretUnavailable(Exception):
    """The worker cannot produce a secret's value; the message is safe to record and log."""


def check_secrets_dir(directory: Path) -> None:
    """Refuse a secrets directory that is missing, not a directory, or writable by every user.

    Raises:
        ConfigError: What is wrong with it (the worker does not start).
    """
    try:
        info = directory.stat()
    except OSError as exc:
        raise ConfigError(f"secrets directory {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"secrets directory {directory} is not a directory")
    if info.st_mode & stat.S_IWOTH:
        raise ConfigError(
            f"secrets directory {directory} is writable by every user (chmod o-w): anyone could "
            "replace the credentials the worker sends"
        )


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of the given secret values replaced by ``[secret]``."""
    for value in sorted(values, key=len, reverse=True):
        if value:
            text = text.replace(value, REDACTED)
    return text


class SecretStore:
    """Resolves secret references from a directory and the environment, with a short cache."""

    def __init__(
        self,
        *,
        directory: Path | None,
        environ: Mapping[str, str],
        worker_id: str,
        cache_ttl: timedelta = timedelta(seconds=5),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if directory is not None:
            check_secrets_dir(directory)
        self._directory = directory
        # Only the variables that can hold secrets are kept.
        self._environ = {k: v for k, v in environ.items() if k.startswith(SECRET_ENV_PREFIX)}
        self._worker_id = worker_id
        self._ttl = cache_ttl.total_seconds()
        self._clock = clock
        self._cache: dict[str, tuple[str, float]] = {}

    def value(self, name: str) -> str:
        """The value of secret ``name``.

        Raises:
            SecretUnavailable: Not found, unreadable, or not usable in a header.
        """
        now = self._clock()
        cached = self._cache.get(name)
        if cached is not None and now < cached[1]:
            return cached[0]
        if not SECRET_NAME_PATTERN.match(name):  # validated at ingest; a hand-made record
            raise SecretUnavailable(f"secret name {name!r} is not valid")
        value, source = self._from_file(name)
        if value is None:
            env_name = secret_env_name(name)
            value, source = self._environ.get(env_name), f"environment variable {env_name}"
        if value is None:
            raise SecretUnavailable(
                f"secret {name!r} not found on worker {self._worker_id} ({self._looked(name)})"
            )
        why = unusable_secret_value(value)
        if why is not None:
            raise SecretUnavailable(f"secret {name!r} on worker {self._worker_id}: {source} {why}")
        if self._ttl > 0:
            self._cache[name] = (value, now + self._ttl)
        return value

    def resolve(
        self, headers: Iterable[tuple[str, HeaderValue]]
    ) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
        """The headers with every reference replaced by ``prefix + value``, and the secret values
        used (so that a caller can keep them out of whatever it reports).

        Raises:
            SecretUnavailable: A referenced secret cannot be resolved.
        """
        out: list[tuple[str, str]] = []
        used: list[str] = []
        for name, value in headers:
            if isinstance(value, SecretRef):
                secret = self.value(value.name)
                used.append(secret)
                out.append((name, value.prefix + secret))
            else:
                out.append((name, value))
        return out, tuple(used)

    def _looked(self, name: str) -> str:
        env = f"no environment variable {secret_env_name(name)}"
        if self._directory is None:
            return f"no DUETIME_SECRETS_DIR, {env}"
        return f"no file {self._directory / name}, {env}"

    def _from_file(self, name: str) -> tuple[str | None, str]:
        if self._directory is None:
            return None, ""
        path = self._directory / name
        where = f"file {path}"
        try:
            # O_NONBLOCK: a FIFO put in the directory must not hang the event loop on open.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None, where
        except OSError as exc:
            raise SecretUnavailable(
                f"secret {name!r} on worker {self._worker_id}: cannot read {where}: "
                f"{exc.strerror or type(exc).__name__}"
            ) from None
        try:
            info = os.fstat(fd)
            problem = None
            if not stat.S_ISREG(info.st_mode):
                problem = "is not a regular file"
            elif info.st_mode & stat.S_IWOTH:
                problem = "is writable by every user (chmod o-w)"
            elif info.st_size > MAX_SECRET_BYTES + 2:
                problem = f"is larger than {MAX_SECRET_BYTES} bytes"
            if problem is not None:
                raise SecretUnavailable(
                    f"secret {name!r} on worker {self._worker_id}: {where} {problem}"
                )
            data = os.read(fd, MAX_SECRET_BYTES + 3)
        finally:
            os.close(fd)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            # The exception's text quotes a byte of the file: leave it out.
            raise SecretUnavailable(
                f"secret {name!r} on worker {self._worker_id}: {where} is not UTF-8 text"
            ) from None
        return text.removesuffix("\n").removesuffix("\r"), where
