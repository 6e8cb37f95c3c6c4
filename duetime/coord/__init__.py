"""Shard ownership for the planner: etcd leases with a fence in PostgreSQL, or none (SKIP LOCKED).

- ``rendezvous``: which live member should own which shard (pure).
- ``backend``: the ``ShardLeaseBackend`` port (grant, keepalive, list, acquire, release) and what
  it returns; ``etcd.EtcdBackend`` is its aetcd adapter, tests/fakes/shard_leases.py its twin.
- ``ownership``: ``ShardOwnership``, one member's view: keeps the lease alive, takes and gives
  back shards as members come and go, and stops answering for its shards once its keepalive has
  not succeeded for TTL minus a margin.
- ``runner``: runs a ``ShardOwnership`` on its own thread and event loop next to a sync service.

docs/failover.md has the design note (tokens, fence, timings, what happens when etcd is away).
"""
