"""Who may write which tenant's jobs on the jobs topic: signed records. Pure (no I/O).

Anyone who can produce to ``<prefix>jobs`` could otherwise define or delete jobs in any tenant.
With a guard secret set (``DUETIME_JOBS_TOPIC_SECRET``, the planner's), every record must say
which tenant it writes and prove that its producer holds that tenant's key::

    duetime-tenant:    <tenant>
    duetime-signature: v1=<hex HMAC-SHA256(tenant key, key bytes + b"\\n" + value bytes)>

A tenant's key is derived from the guard secret (:func:`tenant_key`), so no per-tenant secret is
stored, each tenant's producers get only their own key (``duetime tokens topic-key --tenant T``),
and none can sign for another tenant. The MAC covers the record key and the whole value, so a
signed record cannot be altered or have its key swapped. The planner's ingest rejects (to
``jobs.rejected``, field ``tenant``) a record that is unsigned, wrongly signed, signed for a
tenant other than the definition's, or that would change a job stored in another tenant (a job
id is global: without that check a tenant could take over or delete another's job). Replaying a
signed record changes nothing new: definitions and tombstones apply by version.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

__all__ = [
    "SECRET_ENV",
    "SIGNATURE_HEADER",
    "TENANT_HEADER",
    "check_signature",
    "signature_headers",
    "tenant_key",
]

#: The planner's guard secret; set, the guard is on.
SECRET_ENV = "DUETIME_JOBS_TOPIC_SECRET"
TENANT_HEADER = "duetime-tenant"
SIGNATURE_HEADER = "duetime-signature"
_LABEL = b"duetime-jobs-topic-tenant-v1:"
_MAX_HEADER = 512


def tenant_key(secret: str, tenant: str) -> str:
    """The key ``tenant``'s producers sign with (hex), derived from the guard secret."""
    if not secret:
        raise ValueError("an empty secret derives nothing")
    return hmac.new(secret.encode(), _LABEL + tenant.encode(), hashlib.sha256).hexdigest()


def _mac(key: str, record_key: bytes | None, value: bytes | None) -> str:
    message = (record_key or b"") + b"\n" + (value or b"")
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def signature_headers(
    key: str, tenant: str, record_key: bytes | None, value: bytes | None
) -> list[tuple[str, bytes]]:
    """The headers a producer adds to a jobs-topic record of ``tenant``."""
    return [
        (TENANT_HEADER, tenant.encode()),
        (SIGNATURE_HEADER, f"v1={_mac(key, record_key, value)}".encode()),
    ]


def _header(headers: Sequence[tuple[str, bytes | None]], name: str) -> str | None:
    found = [v for k, v in headers if k == name]
    if len(found) != 1 or found[0] is None or len(found[0]) > _MAX_HEADER:
        return None
    try:
        return found[0].decode("ascii")
    except UnicodeDecodeError:
        return None


def check_signature(
    secret: str,
    headers: Sequence[tuple[str, bytes | None]],
    record_key: bytes | None,
    value: bytes | None,
) -> tuple[str | None, str]:
    """(the tenant the record is signed for, "") or (None, why it is refused).

    The reason never quotes a header's value: it goes to ``jobs.rejected`` and to logs.
    """
    tenant = _header(headers, TENANT_HEADER)
    signature = _header(headers, SIGNATURE_HEADER)
    if tenant is None or signature is None:
        return None, f"unsigned: a record needs one {TENANT_HEADER} and one {SIGNATURE_HEADER}"
    if not signature.startswith("v1="):
        return None, f"{SIGNATURE_HEADER} is not v1=<hex HMAC-SHA256>"
    expected = _mac(tenant_key(secret, tenant), record_key, value)
    if not hmac.compare_digest(signature[3:].encode(), expected.encode()):
        return (
            None,
            f"the signature does not match {TENANT_HEADER} (wrong key, or an altered record)",
        )
    return tenant, ""
