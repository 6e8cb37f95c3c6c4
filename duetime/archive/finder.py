"""Archived runs stay findable: a job's runs read back from the archive's manifests.

Each archived partition has a small JSON manifest beside its data object listing the job ids it
holds, so finding one job's runs costs one listing of the bucket's ``runs/`` prefix (a key per
partition and object, about 730 a year), one small read per manifest, and a read of only the
data objects that hold the job. A manifest is trusted only as far as its data object agrees:
the object's SHA-256 must match the manifest's, or the lookup fails with ``ArchiveError``.
"""

from __future__ import annotations

import json
from datetime import date

from duetime.errors import ArchiveError

from .codec import decode_runs, sha256_hex
from .keys import data_key, day_from_key, runs_prefix
from .model import ArchivedRun
from .ports import ObjectStore

__all__ = ["find_archived_runs"]


def find_archived_runs(
    objects: ObjectStore,
    prefix: str,
    job_id: str,
    *,
    since: date | None = None,
    until: date | None = None,
) -> list[ArchivedRun]:
    """The archived runs of ``job_id`` on days in ``[since, until)``, newest first.

    A day archived twice (its partition re-created and archived again) can hold a run in both
    objects; the copy updated last wins.
    """
    found: dict[object, ArchivedRun] = {}
    for key in objects.list_keys(runs_prefix(prefix)):
        parsed = day_from_key(prefix, key)
        if parsed is None or parsed[2] != "json":
            continue
        day, digest, _ = parsed
        if (since is not None and day < since) or (until is not None and day >= until):
            continue
        try:
            manifest = json.loads(objects.get(key))
        except ValueError as exc:
            raise ArchiveError(f"archive manifest {key} does not parse: {exc}") from exc
        if job_id not in manifest.get("job_ids", ()):
            continue
        d_key = data_key(prefix, day, digest)
        data = objects.get(d_key)
        if sha256_hex(data) != manifest.get("sha256") or digest != manifest.get("sha256"):
            raise ArchiveError(f"archive object {d_key} does not match its manifest {key}")
        for run in decode_runs(data):
            if run.job_id != job_id:
                continue
            kept = found.get(run.run_id)
            if kept is None or run.updated_at > kept.updated_at:
                found[run.run_id] = run
    return sorted(found.values(), key=lambda r: r.scheduled_for, reverse=True)
