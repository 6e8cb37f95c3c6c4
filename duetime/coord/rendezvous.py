"""Rendezvous (highest-random-weight) hashing of shards onto members. Pure.

Every member computes the same assignment from the same member list, with no coordination:
shard ``s`` belongs to the member with the highest ``weight(member, s)``. When a member joins it
takes about ``1/n`` of the shards, each from whichever member had it; when one leaves only its
shards move, spread over the others. The weight is the first 8 bytes of BLAKE2b over
``"<member>/<shard>"``, so it is the same in every process and language.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["assignment", "owner_of", "weight"]


def weight(member: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{member}/{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(shard: int, members: Iterable[str]) -> str | None:
    """The member that should own ``shard`` (``None`` without members); ties go to the name."""
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (weight(member, shard), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


def assignment(members: Iterable[str], shards: Iterable[int]) -> dict[str, set[int]]:
    """Every member's shards (a member with none maps to an empty set)."""
    names = sorted(set(members))
    result: dict[str, set[int]] = {m: set() for m in names}
    for shard in shards:
        owner = owner_of(shard, names)
        if owner is not None:
            result[owner].add(shard)
    return result
