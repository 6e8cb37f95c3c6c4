"""The jobs-topic guard in the planner's ingest: signed records only, each tenant its own jobs.

``duetime.jobs_guard`` has the mechanism (a per-tenant key derived from
``DUETIME_JOBS_TOPIC_SECRET``, an HMAC over the record's key and value). Two checks:

- per record, while decoding (``admit``): the signature holds and names the definition's tenant;
- per batch, before the write (``owner_refusals``): a record changes only a job that does not
  exist or is already its tenant's, judged in topic order as the write applies them, with one
  look-up of the batch's stored jobs.

A refused record goes to ``jobs.rejected`` with the field ``tenant`` like every other refusal.
Without the secret the guard is off and anyone who may produce to the topic writes any tenant
(the planner logs ``jobs.guard_off`` at start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from duetime.errors import InvalidInput
from duetime.events import JobTombstone
from duetime.jobs_guard import SECRET_ENV, TENANT_HEADER, check_signature
from duetime.model import JobDefinition
from duetime.store.store import StoredJob

__all__ = ["SECRET_ENV", "JobsTopicGuard"]


class JobsTopicGuard:
    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("the jobs-topic guard needs a secret")
        self._secret = secret

    def __repr__(self) -> str:
        return "JobsTopicGuard()"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobsTopicGuard | None:
        secret = (os.environ if environ is None else environ).get(SECRET_ENV, "")
        return cls(secret) if secret else None

    def admit(self, msg: Any, item: JobDefinition | JobTombstone) -> None:
        """Raise ``InvalidInput("tenant", ...)`` unless ``msg`` is signed for ``item``'s tenant."""
        tenant, reason = check_signature(self._secret, msg.headers() or [], msg.key(), msg.value())
        if tenant is None:
            raise InvalidInput("tenant", reason)
        if isinstance(item, JobDefinition) and item.tenant != tenant:
            raise InvalidInput(
                "tenant", f"the record is signed for tenant {tenant}, the job is of {item.tenant}"
            )

    def owner_refusals(
        self,
        items: Sequence[tuple[Any, JobDefinition | JobTombstone]],
        stored: Mapping[str, StoredJob],
    ) -> dict[int, str]:
        """Index -> reason for each admitted (message, item) that would change another tenant's
        job; the others keep their order (as ``jobs_apply`` then applies them)."""
        owners: dict[str, str | None] = {job_id: s.tenant for job_id, s in stored.items()}
        refusals: dict[int, str] = {}
        for index, (msg, item) in enumerate(items):
            signed = _signed_tenant(msg)
            owner = owners.get(item.job_id)
            if owner is not None and owner != signed:
                refusals[index] = f"job {item.job_id} belongs to another tenant"
                continue
            if isinstance(item, JobDefinition):
                # A tombstone keeps the owner: it may be stale and delete nothing, and a job
                # deleted and defined again by another tenant in one batch waits a batch.
                owners[item.job_id] = signed
        return refusals


def _signed_tenant(msg: Any) -> str:
    """The tenant header of a record ``admit`` let through (so there is exactly one)."""
    value: bytes = next(v for k, v in (msg.headers() or []) if k == TENANT_HEADER)
    return value.decode("ascii")
