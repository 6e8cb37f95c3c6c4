-- An async target's calls through the API (duetime/async_targets.py, docs/targets.md "Async
-- targets"): one request, one transaction. Every write is fenced by the attempt's lease token,
-- which is also the callback token the target was given: the write applies only while that
-- attempt holds the run (state 'running', the same token). The end of an attempt goes through
-- runs_complete_batch (worker.sql) like every other end.

-- name: attempts_callback_lookup
-- The attempt whose callback token this is, with its run as it is now (locked, so the decision
-- taken on it holds until the transaction ends), how the attempt ended (NULL while it runs), and
-- its job's lease and backoff. No row: no such attempt, or the token is not its token.
SELECT r.run_id, r.scheduled_for, r.state, r.attempt AS run_attempt, r.max_attempts,
       a.outcome AS attempt_outcome,
       (r.state = 'running' AND r.attempt = a.attempt AND r.lease_token = a.lease_token)
           AS holds,
       COALESCE(j.lease_ms, 60000) AS lease_ms,
       j.retry_initial_ms, j.retry_multiplier, j.retry_max_ms, j.retry_jitter
FROM run_attempts a
JOIN runs r ON r.run_id = a.run_id AND r.scheduled_for = a.scheduled_for
LEFT JOIN jobs j ON j.job_id = r.job_id
WHERE a.run_id = :run_id AND a.attempt = :attempt AND a.lease_token = :lease_token
FOR UPDATE OF r;

-- name: runs_callback_renew
-- Renew the attempt's lease (the job's lease from now) and keep the progress it reports (NULL
-- keeps what is there); fenced like a worker's renewal. No row: the attempt no longer holds.
UPDATE runs SET lease_expires_at = now() + CAST(:lease_ms AS bigint) * interval '1 millisecond',
                progress = COALESCE(CAST(:progress AS text), progress), updated_at = now()
WHERE run_id = :run_id AND scheduled_for = :scheduled_for AND lease_token = :lease_token
  AND attempt = :attempt AND state = 'running'
RETURNING lease_expires_at;

-- name: runs_callback_fenced
-- A refused heartbeat, recorded like a fenced completion (invariant I3's evidence).
INSERT INTO run_fenced_completions (run_id, attempt, worker, lease_token, outcome)
VALUES (:run_id, :attempt, :worker, :lease_token, :outcome);
