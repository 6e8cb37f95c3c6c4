"""Shard ownership on the in-memory etcd (tests/fakes/shard_leases.py) with a test-driven clock:
how shards spread, move when members come and go, and when a member must stop working them."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from duetime.coord.ownership import OwnershipConfig, ShardOwnership
from duetime.coord.rendezvous import assignment, owner_of
from duetime.coord.runner import OwnershipThread
from duetime.errors import ConfigError
from duetime.sharding import SHARD_COUNT
from tests.fakes.shard_leases import FakeEtcd

CONFIG = OwnershipConfig(ttl=timedelta(seconds=10), margin=timedelta(seconds=2))


async def _rounds(etcd: FakeEtcd, members: list[ShardOwnership], seconds: float) -> None:
    """Every member steps once per simulated second for ``seconds``."""
    for _ in range(int(seconds)):
        for member in members:
            await member.step(etcd.now)
        etcd.advance(1.0)


def _owned(members: list[ShardOwnership], now: float) -> dict[str, set[int]]:
    return {m.member: set(m.current(now)) for m in members}


def test_rendezvous_is_deterministic_balanced_and_moves_only_the_leavers_shards() -> None:
    three = assignment(["a", "b", "c"], range(SHARD_COUNT))
    assert three == assignment(["c", "b", "a"], range(SHARD_COUNT))
    assert set().union(*three.values()) == set(range(SHARD_COUNT))
    assert all(20 <= len(s) <= 66 for s in three.values()), {k: len(v) for k, v in three.items()}
    two = assignment(["a", "b"], range(SHARD_COUNT))
    # Only c's shards moved; a and b kept all they had.
    assert three["a"] <= two["a"] and three["b"] <= two["b"]
    assert owner_of(5, []) is None


def test_config_rejects_a_margin_not_below_the_ttl() -> None:
    with pytest.raises(ConfigError):
        OwnershipConfig(ttl=timedelta(seconds=4), margin=timedelta(seconds=4))
    with pytest.raises(ConfigError):
        OwnershipConfig(ttl=timedelta(seconds=2.5))


async def test_one_member_owns_every_shard_with_distinct_tokens() -> None:
    etcd = FakeEtcd()
    a = ShardOwnership(etcd, "a", CONFIG)
    await _rounds(etcd, [a], 2)
    tokens = a.current(etcd.now)
    assert set(tokens) == set(range(SHARD_COUNT))
    assert len(set(tokens.values())) == SHARD_COUNT


async def test_two_members_split_the_shards_and_never_share_one() -> None:
    etcd = FakeEtcd()
    a, b = ShardOwnership(etcd, "a", CONFIG), ShardOwnership(etcd, "b", CONFIG)
    await _rounds(etcd, [a], 2)
    for _ in range(5):  # b joins: a gives up b's shards, b takes them on a later round
        await _rounds(etcd, [a, b], 1)
        owned = _owned([a, b], etcd.now)
        assert not owned["a"] & owned["b"]
    want = assignment(["a", "b"], range(SHARD_COUNT))
    assert _owned([a, b], etcd.now) == want


async def test_a_dead_members_shards_move_after_its_lease_with_higher_tokens() -> None:
    etcd = FakeEtcd()
    a, b = ShardOwnership(etcd, "a", CONFIG), ShardOwnership(etcd, "b", CONFIG)
    await _rounds(etcd, [a, b], 4)
    before = dict(a.current(etcd.now))
    assert before
    died_at = etcd.now
    moved_at = None
    for _ in range(20):  # a stops stepping (kill -9); b carries on
        await _rounds(etcd, [b], 1)
        if set(b.current(etcd.now)) == set(range(SHARD_COUNT)):
            moved_at = etcd.now
            break
    assert moved_at is not None
    # Lease TTL after a's last keepalive, plus at most the keepalive period and a poll.
    assert moved_at - died_at <= CONFIG.ttl.total_seconds() + 2
    after = b.current(etcd.now)
    assert all(after[s] > t for s, t in before.items())


async def test_a_paused_member_answers_nothing_after_ttl_minus_margin_before_it_steps() -> None:
    etcd = FakeEtcd()
    a = ShardOwnership(etcd, "a", CONFIG)
    await a.step(0.0)  # the lease is granted at 0: the last success was sent then
    assert len(a.current(0.0)) == SHARD_COUNT
    # The process is stopped; when it runs again it asks before its keepalive task did anything.
    assert a.current(CONFIG.valid_for)
    assert not a.current(CONFIG.valid_for + 0.01)


async def test_etcd_unreachable_shards_kept_until_ttl_minus_margin_then_dropped() -> None:
    etcd = FakeEtcd()
    a = ShardOwnership(etcd, "a", CONFIG)
    await _rounds(etcd, [a], 3)
    tokens = dict(a.current(etcd.now))
    etcd.fail = True
    kept = failed = 0
    for _ in range(12):
        result = await a.step(etcd.now)
        failed += result.failed is not None
        if a.current(etcd.now):
            kept += 1
        etcd.now += 1.0  # the fake server's clock runs on; nothing reaches it
    assert failed >= 3  # a keepalive every ttl / 3, each failing
    assert 5 <= kept <= CONFIG.valid_for + 1
    assert not a.current(etcd.now)
    # etcd back before the server expired the lease? Here it did expire: new lease, new tokens.
    etcd.fail = False
    etcd.advance(0)
    await _rounds(etcd, [a], 3)
    again = a.current(etcd.now)
    assert set(again) == set(tokens)
    assert all(again[s] > tokens[s] for s in tokens)


async def test_a_short_etcd_outage_keeps_the_lease_and_the_same_tokens() -> None:
    etcd = FakeEtcd()
    a = ShardOwnership(etcd, "a", CONFIG)
    await _rounds(etcd, [a], 3)
    tokens = dict(a.current(etcd.now))
    etcd.fail = True
    for _ in range(3):
        await a.step(etcd.now)
        etcd.now += 1.0
    assert a.current(etcd.now) == tokens
    etcd.fail = False
    await _rounds(etcd, [a], 2)
    assert a.current(etcd.now) == tokens


async def test_stop_revokes_the_lease_so_the_shards_move_at_once() -> None:
    etcd = FakeEtcd()
    a, b = ShardOwnership(etcd, "a", CONFIG), ShardOwnership(etcd, "b", CONFIG)
    await _rounds(etcd, [a, b], 4)
    await a.stop()
    assert not a.current(etcd.now)
    await _rounds(etcd, [b], 2)
    assert set(b.current(etcd.now)) == set(range(SHARD_COUNT))


def test_the_runner_thread_owns_shards_and_a_stop_revokes_the_lease() -> None:
    etcd = FakeEtcd()
    config = OwnershipConfig(poll_interval=timedelta(milliseconds=20))
    runner = OwnershipThread(lambda: etcd, "solo", config)
    runner.start()
    try:
        for _ in range(200):  # at most a few seconds; a poll is 20 ms
            if len(runner.current(time.monotonic())) == SHARD_COUNT:
                break
            time.sleep(0.02)
        assert len(runner.current(time.monotonic())) == SHARD_COUNT
    finally:
        runner.stop()
    assert runner.current(time.monotonic()) == {}
    assert not etcd.keys and not etcd.leases  # revoked: the shards are free at once
