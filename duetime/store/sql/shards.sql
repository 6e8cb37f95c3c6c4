-- The shard-ownership fence (migration 0011, docs/failover.md). A batch of shards travels as ONE
-- json parameter :tokens, an array of {"shard_id": n, "token": t}, like the planner's other batches.

-- name: shards_claim
-- A planner that took shards in etcd raises their stored token to its own (the shard key's create
-- revision). A row is raised only from a LOWER token, so a stale planner cannot take a shard back;
-- a row locked by another planner's planning transaction is skipped and claimed on a later round.
-- Returns the shards claimed now (one already claimed with the same token is not returned).
WITH mine AS (
    SELECT m.shard_id, m.token
    FROM json_to_recordset(CAST(:tokens AS json)) AS m(shard_id smallint, token bigint)
), created AS (
    INSERT INTO shard_owners (shard_id, token, owner)
    SELECT shard_id, token, :owner FROM mine
    ON CONFLICT (shard_id) DO NOTHING
    RETURNING shard_id
), raisable AS (
    SELECT o.shard_id FROM shard_owners o JOIN mine USING (shard_id)
    WHERE o.token < mine.token
    FOR UPDATE OF o SKIP LOCKED
), raised AS (
    UPDATE shard_owners o SET token = mine.token, owner = :owner, claimed_at = now()
    FROM mine
    WHERE o.shard_id = mine.shard_id AND o.token < mine.token
      AND o.shard_id IN (SELECT shard_id FROM raisable)
    RETURNING o.shard_id
)
SELECT shard_id FROM created
UNION ALL
SELECT shard_id FROM raised;

-- name: shards_fence
-- First statement of every planning transaction in etcd mode: the shards whose stored token is
-- still the planner's are locked FOR SHARE until the transaction ends (held = true), so no claim
-- can raise them while the batch is written; a shard whose stored token is HIGHER than the
-- planner's has a newer owner, and the refusal is counted on its row (held = false). A shard not
-- claimed yet (no row, or a lower token) is neither.
WITH mine AS (
    SELECT m.shard_id, m.token
    FROM json_to_recordset(CAST(:tokens AS json)) AS m(shard_id smallint, token bigint)
), refused AS (
    UPDATE shard_owners o
    SET rejected = o.rejected + 1, last_rejected_at = now(), last_rejected_owner = :owner
    FROM mine
    WHERE o.shard_id = mine.shard_id AND o.token > mine.token
    RETURNING o.shard_id
), held AS (
    SELECT o.shard_id FROM shard_owners o JOIN mine USING (shard_id)
    WHERE o.token = mine.token
    FOR SHARE OF o
)
SELECT shard_id, true AS held FROM held
UNION ALL
SELECT shard_id, false AS held FROM refused;

-- name: planner_tx_guard
-- The database clock of a planning transaction in etcd mode, and a short idle-in-transaction
-- timeout for it: a planner stopped inside the transaction (SIGSTOP, a VM stall) holds its shards'
-- fence rows FOR SHARE, and the next owner's claim must not wait for it much longer than a lease.
SELECT now() AS now,
       set_config('idle_in_transaction_session_timeout', CAST(:idle_ms AS text), true) AS idle;

-- name: shard_owners_list
-- Every shard's fence row for `duetime shards`.
SELECT shard_id, token, owner, claimed_at, rejected, last_rejected_at, last_rejected_owner
FROM shard_owners
ORDER BY shard_id;
