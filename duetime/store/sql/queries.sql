-- Named queries: each block starts with "-- name: <name>" and is run through SQLAlchemy text()
-- with :named parameters. Store methods carry the same names.

-- name: jobs_upsert
-- Upsert by version: an older or equal version never overwrites a newer definition. next_run_at is
-- recomputed only when the schedule changed (or the job is new), so re-applying a file is harmless.
INSERT INTO jobs AS j (
    job_id, tenant, shard_id, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap,
    start_at, window_ms, catch_up, max_catch_up, overlap, target, target_service, max_attempts,
    retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter, lease_ms, heartbeat_ms, paused,
    next_run_at, version)
VALUES (
    :job_id, :tenant, :shard_id, :schedule_kind, :schedule_expr, :time_zone, :dst_gap,
    :dst_overlap, :start_at, :window_ms, :catch_up, :max_catch_up, :overlap,
    CAST(:target AS jsonb), :target_service, :max_attempts, :retry_initial_ms, :retry_multiplier,
    :retry_max_ms, :retry_jitter, :lease_ms, :heartbeat_ms, :paused, :next_run_at, :version)
ON CONFLICT (job_id) DO UPDATE SET
    tenant = EXCLUDED.tenant,
    schedule_kind = EXCLUDED.schedule_kind,
    schedule_expr = EXCLUDED.schedule_expr,
    time_zone = EXCLUDED.time_zone,
    dst_gap = EXCLUDED.dst_gap,
    dst_overlap = EXCLUDED.dst_overlap,
    start_at = EXCLUDED.start_at,
    window_ms = EXCLUDED.window_ms,
    catch_up = EXCLUDED.catch_up,
    max_catch_up = EXCLUDED.max_catch_up,
    overlap = EXCLUDED.overlap,
    target = EXCLUDED.target,
    target_service = EXCLUDED.target_service,
    max_attempts = EXCLUDED.max_attempts,
    retry_initial_ms = EXCLUDED.retry_initial_ms,
    retry_multiplier = EXCLUDED.retry_multiplier,
    retry_max_ms = EXCLUDED.retry_max_ms,
    retry_jitter = EXCLUDED.retry_jitter,
    lease_ms = EXCLUDED.lease_ms,
    heartbeat_ms = EXCLUDED.heartbeat_ms,
    paused = EXCLUDED.paused,
    next_run_at = CASE
        WHEN (j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap, j.dst_overlap,
              j.start_at) IS DISTINCT FROM
             (EXCLUDED.schedule_kind, EXCLUDED.schedule_expr, EXCLUDED.time_zone,
              EXCLUDED.dst_gap, EXCLUDED.dst_overlap, EXCLUDED.start_at)
        THEN EXCLUDED.next_run_at
        ELSE j.next_run_at END,
    version = EXCLUDED.version,
    updated_at = now()
WHERE j.version < EXCLUDED.version
RETURNING job_id, version, next_run_at;

-- name: jobs_get_version
SELECT version FROM jobs WHERE job_id = :job_id;

-- name: jobs_delete
DELETE FROM jobs WHERE job_id = :job_id AND version < :version RETURNING job_id;

-- name: jobs_get_due
-- The planner's scan: due jobs of the given shards, oldest first, rows locked so that competing
-- planners skip them rather than wait.
SELECT job_id, tenant, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap, start_at,
       window_ms, catch_up, max_catch_up, target_service, max_attempts, next_run_at,
       last_scheduled_for
FROM jobs
WHERE shard_id = ANY(:shards) AND NOT paused AND next_run_at IS NOT NULL
  AND next_run_at <= :horizon
ORDER BY next_run_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: jobs_advance
UPDATE jobs SET next_run_at = :next_run_at,
                last_scheduled_for = COALESCE(:last_scheduled_for, last_scheduled_for),
                updated_at = now()
WHERE job_id = :job_id;

-- name: runs_insert
INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at, max_attempts)
VALUES (:run_id, :job_id, :tenant, :target_service, :scheduled_for, :due_at, :max_attempts)
ON CONFLICT DO NOTHING;

-- name: runs_ensure_partition
SELECT duetime_ensure_runs_partition(CAST(:day AS date));

-- name: runs_get_unpublished
-- The outbox: scheduled runs the broker has not acknowledged, due within the horizon.
SELECT r.run_id, r.job_id, r.tenant, r.target_service, r.scheduled_for, r.due_at, r.attempt,
       r.max_attempts, j.target, j.lease_ms, j.heartbeat_ms, j.retry_initial_ms, j.retry_multiplier,
       j.retry_max_ms, j.retry_jitter, (j.job_id IS NULL) AS job_missing
FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
WHERE r.state = 'scheduled' AND r.published_at IS NULL AND r.due_at <= :horizon
ORDER BY r.due_at
LIMIT :limit
FOR UPDATE OF r SKIP LOCKED;

-- name: runs_mark_published
UPDATE runs SET published_at = now(), updated_at = now()
WHERE run_id = :run_id AND scheduled_for = :scheduled_for AND state = 'scheduled'
  AND published_at IS NULL;

-- name: runs_cancel_orphan
UPDATE runs SET state = 'cancelled', finished_at = now(), last_error = 'job deleted',
                updated_at = now()
WHERE run_id = :run_id AND scheduled_for = :scheduled_for AND state = 'scheduled';

-- name: runs_sweep_unclaimed
-- Safety net: runs that were published but never claimed (broker lost its log, dispatcher
-- crashed) are made publishable again. The claim compare-and-set makes duplicates harmless.
UPDATE runs SET published_at = NULL, updated_at = now()
WHERE state = 'scheduled' AND published_at IS NOT NULL
  AND due_at < now() - make_interval(secs => CAST(:grace_seconds AS double precision))
  AND published_at < now() - make_interval(secs => CAST(:grace_seconds AS double precision));

-- name: runs_complete
-- Ends an attempt, fenced by its lease token: the new state is accepted only from the attempt that
-- holds the lease. Used by workers (outcome succeeded | failed) and by the reaper for expired
-- leases (outcome lease_expired). :state is 'succeeded', 'scheduled' (retry after
-- :retry_delay_ms) or 'dead'.
WITH done AS (
    UPDATE runs SET state = CAST(:state AS text),
                    lease_token = NULL, lease_expires_at = NULL,
                    finished_at = CASE WHEN CAST(:state AS text) = 'scheduled' THEN NULL ELSE now() END,
                    due_at = CASE WHEN CAST(:state AS text) = 'scheduled'
                        THEN now() + make_interval(secs => CAST(:retry_delay_ms AS double precision) / 1000.0)
                        ELSE due_at END,
                    next_attempt_at = CASE WHEN CAST(:state AS text) = 'scheduled'
                        THEN now() + make_interval(secs => CAST(:retry_delay_ms AS double precision) / 1000.0) END,
                    published_at = CASE WHEN CAST(:state AS text) = 'scheduled' THEN NULL ELSE published_at END,
                    last_error = :error, updated_at = now()
    WHERE run_id = :run_id AND scheduled_for = :scheduled_for AND lease_token = :lease_token
      AND state = 'running'
    RETURNING run_id, attempt
), attempt_row AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = :outcome, error = :error,
                              status_code = :status_code,
                              duration_ms = (extract(epoch FROM now() - a.started_at) * 1000)::bigint
    FROM done WHERE a.run_id = done.run_id AND a.attempt = done.attempt
)
SELECT attempt FROM done;

-- name: runs_get_expired
-- The reaper's scan: running attempts whose lease ran out by the database clock.
SELECT r.run_id, r.scheduled_for, r.attempt, r.max_attempts, r.lease_token, r.worker,
       COALESCE(j.retry_initial_ms, 1000) AS retry_initial_ms,
       COALESCE(j.retry_multiplier, 2.0) AS retry_multiplier,
       COALESCE(j.retry_max_ms, 300000) AS retry_max_ms,
       COALESCE(j.retry_jitter, 0.2) AS retry_jitter
FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
WHERE r.state = 'running' AND r.lease_expires_at < now()
ORDER BY r.lease_expires_at
LIMIT :limit
FOR UPDATE OF r SKIP LOCKED;

-- name: runs_get_dead_unpublished
SELECT run_id, job_id, tenant, scheduled_for, attempt, last_error, finished_at
FROM runs
WHERE state = 'dead' AND dead_published_at IS NULL
ORDER BY finished_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: runs_mark_dead_published
UPDATE runs SET dead_published_at = now(), updated_at = now()
WHERE run_id = :run_id AND scheduled_for = :scheduled_for;

-- name: jobs_list
SELECT job_id, tenant, shard_id, schedule_kind, schedule_expr, time_zone, target_service,
       paused, next_run_at, version, created_at, updated_at
FROM jobs
ORDER BY job_id
LIMIT :limit;

-- name: runs_list
SELECT run_id, job_id, tenant, scheduled_for, due_at, state, attempt, max_attempts, worker,
       started_at, finished_at, last_error, published_at
FROM runs
WHERE (CAST(:job_id AS text) IS NULL OR job_id = :job_id)
ORDER BY scheduled_for DESC, job_id
LIMIT :limit;

-- name: run_attempts_list
SELECT run_id, attempt, worker, started_at, finished_at, outcome, status_code, error, duration_ms
FROM run_attempts
WHERE run_id = :run_id
ORDER BY attempt;

-- name: db_now
SELECT now() AS now;

-- name: jobs_pause
UPDATE jobs SET paused = true, version = version + 1, updated_at = now()
WHERE job_id = :job_id AND NOT paused
RETURNING job_id, version;

-- name: jobs_get_schedule
SELECT job_id, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap, start_at, paused
FROM jobs WHERE job_id = :job_id FOR UPDATE;

-- name: jobs_resume
-- A paused period is not an outage: the job resumes at its next occurrence after now, with no
-- catch-up for what fell into the pause.
UPDATE jobs SET paused = false, next_run_at = :next_run_at, version = version + 1,
                updated_at = now()
WHERE job_id = :job_id AND paused
RETURNING job_id, version;

-- name: jobs_remove
-- Removes a job; its runs stay as history, and scheduled runs not yet published are cancelled by
-- the planner's outbox when it finds the job gone.
DELETE FROM jobs WHERE job_id = :job_id RETURNING job_id, version;
