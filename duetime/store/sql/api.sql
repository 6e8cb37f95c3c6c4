-- The REST API's reads and actions (services/api, docs/api.md). Every statement takes :tenant:
-- NULL for an admin token (every tenant), else the token's tenant, so a row of another tenant
-- is never read or changed: it is "not found", the same as a row that does not exist.

-- name: api_jobs_get
SELECT job_id, tenant, shard_id, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap,
       start_at, window_ms, catch_up, max_catch_up, overlap, target, target_service,
       max_attempts, retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter, lease_ms,
       heartbeat_ms, paused, next_run_at, last_scheduled_for, version, created_at, updated_at
FROM jobs
WHERE job_id = :job_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant);

-- name: api_jobs_page
-- Keyset pagination on job_id (the cursor is the last job_id of the previous page). :text is
-- matched as a plain substring (strpos), so % and _ in it mean nothing special.
SELECT job_id, tenant, shard_id, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap,
       start_at, window_ms, catch_up, max_catch_up, overlap, target, target_service,
       max_attempts, retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter, lease_ms,
       heartbeat_ms, paused, next_run_at, last_scheduled_for, version, created_at, updated_at
FROM jobs
WHERE (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
  AND (CAST(:filter_tenant AS text) IS NULL OR tenant = :filter_tenant)
  AND (CAST(:paused AS boolean) IS NULL OR paused = :paused)
  AND (CAST(:text AS text) IS NULL
       OR strpos(lower(job_id), lower(:text)) > 0
       OR strpos(lower(target_service), lower(:text)) > 0)
  AND (CAST(:after AS text) IS NULL OR job_id > :after)
ORDER BY job_id
LIMIT :limit;

-- name: api_jobs_tenant_of
-- Which tenant a job id belongs to, whoever asks (a create must not take another tenant's id).
SELECT tenant FROM jobs WHERE job_id = :job_id;

-- name: api_jobs_remove
DELETE FROM jobs
WHERE job_id = :job_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
RETURNING job_id, version;

-- name: api_runs_page
-- Newest first; keyset on (scheduled_for, run_id) below the cursor's.
SELECT run_id, job_id, tenant, target_service, scheduled_for, due_at, state, attempt,
       max_attempts, worker, released_at, throttled_ms, started_at, finished_at, last_error,
       published_at
FROM runs
WHERE (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
  AND (CAST(:filter_tenant AS text) IS NULL OR tenant = :filter_tenant)
  AND (CAST(:job_id AS text) IS NULL OR job_id = :job_id)
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:since AS timestamptz) IS NULL OR scheduled_for >= :since)
  AND (CAST(:until AS timestamptz) IS NULL OR scheduled_for < :until)
  AND (CAST(:after_scheduled_for AS timestamptz) IS NULL
       OR (scheduled_for, run_id) < (CAST(:after_scheduled_for AS timestamptz),
                                     CAST(:after_run_id AS uuid)))
ORDER BY scheduled_for DESC, run_id DESC
LIMIT :limit;

-- name: api_runs_get
SELECT run_id, job_id, tenant, target_service, scheduled_for, due_at, state, attempt,
       max_attempts, worker, released_at, throttled_ms, started_at, finished_at, last_error,
       published_at
FROM runs
WHERE run_id = :run_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant);

-- name: api_run_attempts
SELECT attempt, worker, started_at, finished_at, outcome, status_code, error, duration_ms,
       due_at, released_at, throttled_ms
FROM run_attempts_all
WHERE run_id = :run_id AND scheduled_for = :scheduled_for
ORDER BY attempt;

-- name: api_runs_retry_dead
-- One more attempt for a dead run: it is scheduled again, due now, with max_attempts raised by
-- one (the attempt count goes on, so every attempt keeps its number and fencing token order).
-- The outbox publishes it like any retry; if it dies again it is published on runs.dead again.
UPDATE runs SET state = 'scheduled', max_attempts = attempt + 1, due_at = now(),
                next_attempt_at = now(), published_at = NULL, finished_at = NULL,
                dead_published_at = NULL, lease_token = NULL, lease_expires_at = NULL,
                updated_at = now()
WHERE run_id = :run_id AND state = 'dead'
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
RETURNING run_id, scheduled_for, attempt, max_attempts, state;

-- name: api_stats_outbox
-- Scheduled runs due by now that the broker has not acknowledged yet (the outbox backlog).
SELECT count(*) AS runs, min(due_at) AS oldest_due_at, now() AS now
FROM runs
WHERE state = 'scheduled' AND published_at IS NULL AND due_at <= now()
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant);

-- name: api_forecast_planned
-- Runs planned and waiting, per minute of due_at, target and tenant, up to :horizon.
-- Read through the two partial indexes on scheduled runs (runs_outbox_idx, runs_unclaimed_idx,
-- both on due_at): `state` alone matches neither, and was a scan of the day's partition.
SELECT date_trunc('minute', due_at) AS minute, target_service, tenant, count(*) AS runs
FROM (
    SELECT due_at, target_service, tenant FROM runs
    WHERE state = 'scheduled' AND published_at IS NULL
      AND due_at >= date_trunc('minute', now()) AND due_at < :horizon
      AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
    UNION ALL
    SELECT due_at, target_service, tenant FROM runs
    WHERE state = 'scheduled' AND published_at IS NOT NULL
      AND due_at >= date_trunc('minute', now()) AND due_at < :horizon
      AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
) planned
GROUP BY 1, 2, 3;

-- name: api_forecast_jobs
-- Active jobs due before :horizon, grouped by what decides their occurrences.
SELECT schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap, start_at, window_ms,
       target_service, tenant, next_run_at, count(*) AS jobs
FROM jobs
WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at < :horizon
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
GROUP BY schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap, start_at, window_ms,
         target_service, tenant, next_run_at;
