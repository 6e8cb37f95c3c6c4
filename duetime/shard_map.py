"""The shard map: which PostgreSQL cluster holds which of the 128 shards.

A job and all its runs live in the cluster of the job's shard (``sharding.shard_for``). The map is
configuration, the same in every process: ``DUETIME_SHARD_MAP`` (or ``stack.env``) holds entries
``FIRST-LAST=URL`` separated by ``;`` (or newlines), for instance::

    DUETIME_SHARD_MAP="0-63=postgresql://pg-a/duetime;64-127=postgresql://pg-b/duetime"

The ranges must cover shards 0 to 127 exactly once; several ranges may name the same URL. Without
a map every shard lives in ``DUETIME_DATABASE_URL``: one cluster.

The *home* cluster is the one holding shard 0. It also keeps what belongs to no shard: tenants,
target limits and the flow-control grants, API tokens and sign-in links, alerts, the due-load
forecast. With a map, ``DUETIME_DATABASE_URL`` names the home cluster (it may be left out; set,
it must be shard 0's URL).

Moving shards between clusters (changing the map) is not done online: a shard's rows must be
copied first (docs/clusters.md).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from duetime.errors import ConfigError
from duetime.sharding import SHARD_COUNT, shard_for

__all__ = ["ShardMap"]

T = TypeVar("T")
_ENTRY = re.compile(r"(\d+)(?:-(\d+))?=(\S+)")


@dataclass(frozen=True)
class ShardMap:
    """``urls[i]`` is cluster ``i``; ``cluster_of[shard]`` the index of the shard's cluster."""

    urls: tuple[str, ...]
    cluster_of: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.cluster_of) != SHARD_COUNT:
            raise ConfigError(f"a shard map must place all {SHARD_COUNT} shards")
        if not self.urls or any(not url for url in self.urls):
            raise ConfigError("a shard map needs a database URL for every cluster")
        if len(set(self.urls)) != len(self.urls):
            raise ConfigError("a shard map lists a database URL twice")
        used = set(self.cluster_of)
        if used != set(range(len(self.urls))):
            raise ConfigError("every cluster of a shard map must hold at least one shard")

    @classmethod
    def single(cls, url: str) -> ShardMap:
        """Every shard in one cluster."""
        return cls((url,), (0,) * SHARD_COUNT)

    @classmethod
    def even(cls, urls: Sequence[str]) -> ShardMap:
        """``urls`` holding contiguous, equal ranges of shards (what ``--pg-clusters N`` writes)."""
        if not urls:
            raise ConfigError("a shard map needs at least one database URL")
        n = len(urls)
        return cls(tuple(urls), tuple(shard * n // SHARD_COUNT for shard in range(SHARD_COUNT)))

    @classmethod
    def parse(cls, text: str) -> ShardMap:
        """Parse ``FIRST-LAST=URL;...``; a ``ConfigError`` names what is wrong."""
        entries = [e.strip() for e in re.split(r"[;\n]", text) if e.strip()]
        if not entries:
            raise ConfigError("DUETIME_SHARD_MAP is empty")
        urls: list[str] = []
        owner: list[int | None] = [None] * SHARD_COUNT
        for entry in entries:
            found = _ENTRY.fullmatch(entry)
            if found is None:
                raise ConfigError(
                    f"DUETIME_SHARD_MAP entry {_redact(entry)!r} is not FIRST-LAST=URL "
                    "(for instance 0-63=postgresql://host/db)"
                )
            first = int(found.group(1))
            last = int(found.group(2) or first)
            url = found.group(3)
            if not (0 <= first <= last < SHARD_COUNT):
                raise ConfigError(
                    f"DUETIME_SHARD_MAP range {first}-{last} is outside shards 0-{SHARD_COUNT - 1}"
                    " or backwards"
                )
            if url not in urls:
                urls.append(url)
            index = urls.index(url)
            for shard in range(first, last + 1):
                if owner[shard] is not None:
                    raise ConfigError(f"DUETIME_SHARD_MAP places shard {shard} twice")
                owner[shard] = index
        missing = [shard for shard, index in enumerate(owner) if index is None]
        if missing:
            raise ConfigError(
                f"DUETIME_SHARD_MAP leaves shards unplaced: {_ranges(missing)}"
                f" (all of 0-{SHARD_COUNT - 1} must be placed)"
            )
        return cls(tuple(urls), tuple(i for i in owner if i is not None))

    def render(self) -> str:
        """The ``FIRST-LAST=URL;...`` form ``parse`` reads (contiguous runs merged)."""
        parts: list[str] = []
        start = 0
        for shard in range(1, SHARD_COUNT + 1):
            if shard == SHARD_COUNT or self.cluster_of[shard] != self.cluster_of[start]:
                parts.append(f"{start}-{shard - 1}={self.urls[self.cluster_of[start]]}")
                start = shard
        return ";".join(parts)

    @property
    def home_url(self) -> str:
        """The cluster of shard 0, which also keeps the tables of no shard."""
        return self.urls[self.cluster_of[0]]

    @property
    def size(self) -> int:
        return len(self.urls)

    def url_for_shard(self, shard: int) -> str:
        return self.urls[self.cluster_of[shard]]

    def cluster_of_job(self, job_id: str) -> int:
        return self.cluster_of[shard_for(job_id)]

    def shards_of(self, cluster: int) -> frozenset[int]:
        return frozenset(s for s, c in enumerate(self.cluster_of) if c == cluster)

    def split(self, items: Iterable[T], job_id: Callable[[T], str]) -> dict[int, list[T]]:
        """``items`` per cluster index by each item's job id, order kept within a cluster."""
        if len(self.urls) == 1:
            listed = list(items)
            return {0: listed} if listed else {}
        out: dict[int, list[T]] = {}
        cluster_of = self.cluster_of
        for item in items:
            out.setdefault(cluster_of[shard_for(job_id(item))], []).append(item)
        return out

    def split_shards(self, shards: Iterable[int]) -> dict[int, frozenset[int]]:
        """``shards`` per cluster index."""
        out: dict[int, set[int]] = {}
        for shard in shards:
            out.setdefault(self.cluster_of[shard], set()).add(shard)
        return {index: frozenset(found) for index, found in out.items()}


def _ranges(shards: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = shards[0]
    for shard in [*shards[1:], -2]:
        if shard != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = shard
        prev = shard
    return ", ".join(out)


def _redact(entry: str) -> str:
    """An entry with any password in its URL hidden (error messages reach logs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", entry)
