"""Archived runs stay findable: a job's runs read back from the archive's manifests.

Each archived partition has a small JSON manifest beside its data object listing the job ids it
holds, so finding one job's runs costs one listing of the bucket's ``runs/`` prefix (a key per
partition and object, about 730 a year; one listing per cluster with several clusters), one
small read per manifest, and a read of only the data objects that hold the job. A manifest is
trusted only as far as its data object agrees: the object's SHA-256 must match the manifest's,
or the lookup fails with ``ArchiveError``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import date

from duetime.errors import ArchiveError

from .codec import decode_runs, sha256_hex
from .keys import data_key, day_from_key, runs_prefix
from .model import ArchivedRun
from .ports import ObjectStore

__all__ = ["find_archived_runs", "find_archived_runs_under"]


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
    return find_archived_runs_under(objects, [prefix], job_id, since=since, until=until)


def find_archived_runs_under(
    objects: ObjectStore,
    prefixes: Sequence[str],
    job_id: str,
    *,
    since: date | None = None,
    until: date | None = None,
) -> list[ArchivedRun]:
    """``find_archived_runs`` under each of ``prefixes`` (every cluster's archive,
    ``cluster_keys.cluster_prefixes``), merged newest first (scheduled_for, then run_id).

    A job's runs are under its cluster's prefix, but what was archived before its shard moved
    is under another's; a run found under two prefixes is one run, the copy updated last.
    """
    found: dict[uuid.UUID, ArchivedRun] = {}
    for prefix in prefixes:
        _collect(objects, prefix, job_id, since, until, found)
    return sorted(found.values(), key=lambda r: (r.scheduled_for, r.run_id), reverse=True)


def _collect(
    objects: ObjectStore,
    prefix: str,
    job_id: str,
    since: date | None,
    until: date | None,
    found: dict[uuid.UUID, ArchivedRun],
) -> None:
    """Add the runs of ``job_id`` archived under ``prefix`` to ``found`` (by run id)."""
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
