-- Named queries: each block starts with "-- name: <name>" and is run through SQLAlchemy text()
-- with :named parameters. Store methods carry the same names.

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

-- name: runs_get_expired
-- The reaper's safety-net scan: running attempts whose lease ran out by the database clock,
-- whether or not the heartbeat stream showed them (sql/reaper.sql has the stream's query).
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
       released_at, throttled_ms, started_at, finished_at, last_error, published_at
FROM runs
WHERE (CAST(:job_id AS text) IS NULL OR job_id = :job_id)
ORDER BY scheduled_for DESC, job_id
LIMIT :limit;

-- name: run_attempts_list
SELECT run_id, attempt, worker, started_at, finished_at, outcome, status_code, error, duration_ms,
       due_at, released_at, throttled_ms
FROM run_attempts_all
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
-- catch-up for what fell into the pause; the occurrence ledger records the pause as a gap, from
-- the first occurrence it held back.
WITH held AS (
    SELECT job_id, next_run_at FROM jobs WHERE job_id = :job_id AND paused FOR UPDATE
), resumed AS (
    UPDATE jobs j SET paused = false, next_run_at = :next_run_at, version = j.version + 1,
                      cold_bucket = duetime_cold_bucket(
                          CAST(:next_run_at AS timestamptz),
                          now() + make_interval(secs => CAST(:hot_horizon_s AS double precision))),
                      updated_at = now()
    FROM held WHERE j.job_id = held.job_id
    RETURNING j.job_id, j.version, held.next_run_at AS held_from
), gap AS (
    INSERT INTO occurrence_gaps (job_id, first_at, end_at, reason)
    SELECT job_id, held_from, CAST(:next_run_at AS timestamptz), 'paused' FROM resumed
    WHERE held_from < CAST(:next_run_at AS timestamptz)
    ON CONFLICT DO NOTHING
)
SELECT job_id, version FROM resumed;

-- name: jobs_remove
-- Removes a job; its runs stay as history, and scheduled runs not yet published are cancelled by
-- the planner's outbox when it finds the job gone.
DELETE FROM jobs WHERE job_id = :job_id RETURNING job_id, version;

-- name: ledger_job
SELECT job_id, tenant, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap, start_at,
       catch_up, paused, next_run_at, created_at
FROM jobs WHERE job_id = :job_id;

-- name: ledger_runs
SELECT run_id, scheduled_for, state, attempt, last_error, started_at, finished_at
FROM runs
WHERE job_id = :job_id AND scheduled_for >= :since AND scheduled_for < :until
ORDER BY scheduled_for;

-- name: ledger_gaps
SELECT first_at, end_at, reason, policy
FROM occurrence_gaps
WHERE job_id = :job_id AND first_at < :until AND end_at > :since
ORDER BY first_at;
