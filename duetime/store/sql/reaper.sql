-- The reaper's statements, one per batch of leases (never one per run). The reaper learns of a
-- lease from the heartbeat stream, but PostgreSQL judges expiry with its own clock: a lease is
-- expired when lease_expires_at < now() here, whatever the stream or the reaper's host clock say.
-- The expired attempts are then ended by runs_complete_batch (worker.sql) in the same
-- transaction, under the locks taken here, with the outcome 'lease_expired'.

-- name: runs_expired_among
-- Which of the given attempts have an expired lease, by the database clock. Those are locked
-- (FOR UPDATE SKIP LOCKED, like the scan) for runs_complete_batch in the same transaction, and
-- returned with expired = true. Attempts still running whose lease holds (or whose row another
-- transaction has locked: a worker renewing, another reaper expiring) come back with
-- expired = false and their lease_expires_at, for the reaper to look again later. An attempt in
-- neither set is no longer running: it ended, or the run moved on to another attempt.
WITH req AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:scheduled_fors AS timestamptz[]),
                         CAST(:attempts AS integer[]))
        AS t(run_id, scheduled_for, attempt)
), expired AS (
    SELECT r.run_id, r.scheduled_for, r.attempt, r.max_attempts, r.lease_token, r.worker,
           r.lease_expires_at,
           COALESCE(j.retry_initial_ms, 1000) AS retry_initial_ms,
           COALESCE(j.retry_multiplier, 2.0) AS retry_multiplier,
           COALESCE(j.retry_max_ms, 300000) AS retry_max_ms,
           COALESCE(j.retry_jitter, 0.2) AS retry_jitter
    FROM runs r
    JOIN req ON r.run_id = req.run_id AND r.scheduled_for = req.scheduled_for
    LEFT JOIN jobs j ON j.job_id = r.job_id
    WHERE r.state = 'running' AND r.attempt = req.attempt AND r.lease_expires_at < now()
    FOR UPDATE OF r SKIP LOCKED
)
SELECT true AS expired, e.run_id, e.scheduled_for, e.attempt, e.max_attempts, e.lease_token,
       e.worker, e.lease_expires_at, e.retry_initial_ms, e.retry_multiplier, e.retry_max_ms,
       e.retry_jitter
FROM expired e
UNION ALL
SELECT false AS expired, r.run_id, r.scheduled_for, r.attempt, r.max_attempts, r.lease_token,
       r.worker, r.lease_expires_at, NULL, NULL, NULL, NULL
FROM runs r
JOIN req ON r.run_id = req.run_id AND r.scheduled_for = req.scheduled_for
WHERE r.state = 'running' AND r.attempt = req.attempt
  AND NOT EXISTS (SELECT 1 FROM expired e WHERE e.run_id = r.run_id);
