-- Re-emitting run events from the database (duetime reemit, docs/consumers.md).

-- name: runs_reemit_page
-- The runs scheduled in [:since, :until) (of one job, or all), in the given states, after the
-- keyset (:after_scheduled_for, :after_run_id), with their job's current target and policies
-- (job_missing when the job was deleted since). Pruned to the day partitions of the range.
SELECT r.run_id, r.job_id, r.tenant, r.target_service, r.scheduled_for, r.due_at, r.attempt,
       r.max_attempts, r.state, r.last_error, r.finished_at,
       j.target, j.lease_ms, j.heartbeat_ms, j.retry_initial_ms, j.retry_multiplier,
       j.retry_max_ms, j.retry_jitter, (j.job_id IS NULL) AS job_missing
FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
WHERE r.scheduled_for >= :since AND r.scheduled_for < :until
  AND (CAST(:job_id AS text) IS NULL OR r.job_id = CAST(:job_id AS text))
  AND r.state = ANY(CAST(:states AS text[]))
  AND (r.scheduled_for, r.run_id) > (CAST(:after_scheduled_for AS timestamptz), CAST(:after_run_id AS uuid))
ORDER BY r.scheduled_for, r.run_id
LIMIT :limit;
