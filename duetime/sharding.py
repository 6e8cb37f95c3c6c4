"""Shard and partition assignment: Kafka's murmur2, so a job's shard is its jobs partition.

``shard_id = (murmur2(utf8(job_id)) & 0x7fffffff) % 128``. This is byte-for-byte the hash the
Java client's default partitioner and librdkafka's ``murmur2`` / ``murmur2_random`` partitioners
use, so any language can compute it; and when the jobs topic's partition count divides 128, the
job's partition is ``shard_id % partitions``, so the owner of shard S reads exactly the partition
it needs.
"""

from __future__ import annotations

import struct

__all__ = ["SHARD_COUNT", "murmur2", "partition_for", "shard_for"]

SHARD_COUNT = 128
_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (signed result, as Java's ``Utils.murmur2``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    # The 4-byte little-endian words in one C call rather than four byte lookups each.
    for k in struct.unpack_from(f"<{end // 4}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def shard_for(job_id: str) -> int:
    """The job's shard (0..127): the same number on every planner, in every language."""
    return partition_for(job_id, SHARD_COUNT)
