"""shard_for must equal Kafka's default partitioner in every client (murmur2 vectors from Kafka)."""

from __future__ import annotations

import pytest

from duetime.sharding import SHARD_COUNT, murmur2, partition_for, shard_for

# Vectors from Apache Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


def test_shard_is_partition_modulo_when_partitions_divide_128() -> None:
    for i in range(2000):
        job_id = f"job-{i}"
        shard = shard_for(job_id)
        assert 0 <= shard < SHARD_COUNT
        for partitions in (1, 2, 8, 32, 128):
            assert partition_for(job_id, partitions) == shard % partitions


def test_shards_spread_evenly() -> None:
    counts = [0] * SHARD_COUNT
    for i in range(128_00):
        counts[shard_for(f"tenant-a/job-{i}")] += 1
    assert min(counts) > 50 and max(counts) < 160
