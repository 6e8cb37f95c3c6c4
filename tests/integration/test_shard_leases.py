"""One contract for the ShardLeaseBackend port, run against the in-memory etcd and the real one.

The ownership unit tests (tests/unit/test_shard_ownership.py) trust the fake; this suite checks
that etcd behaves the same way for every rule they rely on: a create-if-absent take on a lease,
the create revision as a token that grows with every owner, a retried take recognised, a release
that needs the token, and a lease whose end takes its keys with it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from duetime.coord.backend import ShardLeaseBackend
from duetime.coord.etcd import EtcdBackend, parse_endpoint, parse_endpoints
from duetime.errors import ConfigError, CoordError
from duetime_infra import StackUrls
from tests.fakes.shard_leases import FakeEtcd

pytestmark = pytest.mark.integration


@pytest.fixture(params=["fake", "etcd"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[ShardLeaseBackend]:
    if request.param == "fake":
        yield FakeEtcd()
        return
    stack: StackUrls = request.getfixturevalue("stack")
    host, port = parse_endpoint(stack.etcd_endpoints)
    real = EtcdBackend(host, port, f"/duetime-test/{uuid.uuid4().hex[:8]}/")
    try:
        yield real
    finally:
        await real.close()


async def test_a_shard_is_taken_once_and_its_token_is_its_create_revision(
    backend: ShardLeaseBackend,
) -> None:
    a = await backend.grant(10)
    b = await backend.grant(10)
    await backend.join("a", a)
    await backend.join("b", b)
    token = await backend.acquire(7, "a", a)
    assert token is not None and token > 0
    assert await backend.acquire(7, "b", b) is None
    # A retry of a take that succeeded (its reply lost) is recognised by the lease.
    assert await backend.acquire(7, "a", a) == token
    view = await backend.view()
    assert view.members >= {"a", "b"}
    assert view.shards[7].member == "a"
    assert view.shards[7].lease == a
    assert view.shards[7].create_revision == token


async def test_release_needs_the_token_and_the_next_owner_gets_a_larger_one(
    backend: ShardLeaseBackend,
) -> None:
    a = await backend.grant(10)
    b = await backend.grant(10)
    first = await backend.acquire(3, "a", a)
    assert first is not None
    assert not await backend.release(3, first - 1)
    assert await backend.release(3, first)
    second = await backend.acquire(3, "b", b)
    assert second is not None and second > first
    assert not await backend.release(3, first)  # the old owner cannot delete the new key


async def test_a_revoked_lease_takes_its_keys_and_its_keepalive_reports_it_gone(
    backend: ShardLeaseBackend,
) -> None:
    a = await backend.grant(10)
    assert await backend.keepalive(a) > 0
    await backend.join("a", a)
    old = await backend.acquire(1, "a", a)
    assert old is not None
    await backend.revoke(a)
    view = await backend.view()
    assert 1 not in view.shards and "a" not in view.members
    b = await backend.grant(10)
    new = await backend.acquire(1, "b", b)
    assert new is not None and new > old


async def test_an_unreachable_etcd_raises_coord_error() -> None:
    # Port 9 (discard) on loopback: nothing listens there.
    dead = EtcdBackend("127.0.0.1", 9, "/duetime-test/dead/", timeout=0.5)
    try:
        with pytest.raises(CoordError):
            await dead.grant(10)
    finally:
        await dead.close()


def test_endpoint_parsing() -> None:
    assert parse_endpoint("http://127.0.0.1:2379,http://127.0.0.1:22379") == ("127.0.0.1", 2379)
    assert parse_endpoint("vm:23379") == ("vm", 23379)
    with pytest.raises(ConfigError):
        parse_endpoint("http://nohost")


async def test_a_failed_endpoint_moves_the_adapter_to_the_next_one(stack: StackUrls) -> None:
    host, port = parse_endpoint(stack.etcd_endpoints)
    # The first endpoint is dead (nothing listens on port 9); the lease lives on the cluster.
    backend = EtcdBackend.from_endpoints(
        f"http://127.0.0.1:9,http://{host}:{port}",
        f"/duetime-test/{uuid.uuid4().hex[:8]}/",
        timeout=0.5,
    )
    try:
        with pytest.raises(CoordError):
            await backend.grant(10)
        assert backend.endpoint == (host, port)
        lease = await backend.grant(10)
        assert await backend.keepalive(lease) > 0
    finally:
        await backend.close()


def test_endpoint_lists_are_parsed_whole() -> None:
    assert parse_endpoints("a:1, http://b:2 ,") == [("a", 1), ("b", 2)]
    with pytest.raises(ConfigError):
        parse_endpoints(" , ")
