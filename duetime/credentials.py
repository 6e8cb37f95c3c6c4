"""Credentials in HTTP headers travel by reference: the rules both ends of a run agree on. Pure.

A job definition is stored in PostgreSQL and copied onto the jobs topic, every ``runs.due.*``
topic and ``runs.ready``, where anyone who can read a topic or a backup reads it. So a header that
carries a credential names a secret instead of holding it (``{"secret": "billing-api-token",
"prefix": "Bearer "}``), and only the worker that makes the call turns the name into the value,
from its own secrets directory or environment (``duetime_workers.secret_store``).

This module holds what the job side and the worker side share: which names a secret may have,
the environment variable a name maps to, which header names count as credentials (a literal value
for one of them is refused when the job is validated), and the limits of a secret's value.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_WORDS",
    "MAX_SECRET_BYTES",
    "SECRET_ENV_PREFIX",
    "SECRET_NAME_PATTERN",
    "is_credential_header",
    "secret_env_name",
    "unusable_secret_value",
]

# No "/" and no leading ".", so a name is always a plain file inside the secrets directory.
SECRET_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SECRET_ENV_PREFIX = "DUETIME_SECRET_"
# Far above any token; a header value this large is a mistake (the job's headers total 16 KiB).
MAX_SECRET_BYTES = 8 * 1024

#: Header names (lower case) whose value is a credential whatever it looks like.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
#: A header name (lower case) containing one of these carries a credential: ``X-Api-Key``,
#: ``X-Auth-Token``, ``X-Client-Secret``, ``X-Authorization``, ``X-Vault-Token`` ...
#: "key" alone is not on the list: ``X-Routing-Key`` and ``X-Cache-Key`` are routing data.
CREDENTIAL_WORDS = (
    "authorization",
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "api_key",
    "apikey",
    "credential",
)


@functools.lru_cache(maxsize=4096)  # a file of 100k jobs repeats a handful of header names
def is_credential_header(name: str) -> bool:
    """Whether a header of this name carries a credential, so its value must be a reference."""
    lowered = name.lower()
    return lowered in CREDENTIAL_HEADERS or any(word in lowered for word in CREDENTIAL_WORDS)


def secret_env_name(name: str) -> str:
    """The environment variable a worker reads secret ``name`` from: ``billing-api-token`` ->
    ``DUETIME_SECRET_BILLING_API_TOKEN`` (upper case, ``-`` and ``.`` as ``_``)."""
    return SECRET_ENV_PREFIX + name.upper().replace("-", "_").replace(".", "_")


def unusable_secret_value(value: str) -> str | None:
    """Why a resolved secret cannot be sent as (part of) a header value, or None if it can.

    The reason never quotes the value. Only printable ASCII, space and tab are allowed: CR, LF or
    NUL would split the request (header injection), and tokens, keys and base64 credentials are
    ASCII, so anything else is a damaged file rather than a credential.
    """
    if not value:
        return "is empty"
    if len(value.encode("utf-8")) > MAX_SECRET_BYTES:
        return f"is larger than {MAX_SECRET_BYTES} bytes"
    for ch in value:
        if not (" " <= ch <= "~" or ch == "\t"):
            if ch in "\r\n\x00":
                return "contains CR, LF or NUL"
            return "contains a character other than printable ASCII"
    return None
