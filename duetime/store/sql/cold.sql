-- The cold tier's loader (migration 0015, docs/planner.md "The cold tier"). With :tokens (etcd
-- mode) only rows of shards whose stored fencing token is the one given are touched, the same
-- condition as the planner's writes (sql/planner.sql, sql/shards.sql).

-- name: jobs_cold_buckets
-- The cold buckets of :shards that start before :before (now + the hot horizon; past ones too,
-- when a loader was away), oldest first, with their jobs. A range of the cold index that holds
-- only what is to be loaded: nothing once the coming hour is hot.
SELECT cold_bucket AS bucket, count(*) AS jobs
FROM jobs
WHERE cold_bucket IS NOT NULL AND cold_bucket < :before AND shard_id = ANY(:shards)
GROUP BY cold_bucket
ORDER BY cold_bucket
LIMIT :limit;

-- name: jobs_cold_load
-- One bucket made hot: its rows of :shards enter the due index. Rows another transaction holds
-- (a job write) are skipped, and loaded by the next round, which finds the bucket again. The
-- definition's version and updated_at do not change: the job is the same, only where it is
-- indexed moves.
WITH picked AS (
    SELECT job_id FROM jobs
    WHERE cold_bucket = :bucket AND shard_id = ANY(:shards)
      AND (CAST(:tokens AS text) IS NULL
           OR shard_id IN (SELECT o.shard_id FROM shard_owners o
                           JOIN json_to_recordset(CAST(:tokens AS json))
                                AS t(shard_id smallint, token bigint)
                             ON t.shard_id = o.shard_id AND t.token = o.token))
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET cold_bucket = NULL
FROM picked
WHERE j.job_id = picked.job_id AND j.cold_bucket = :bucket;
