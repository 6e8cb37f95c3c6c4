-- Archiving old day partitions of runs (duetime archive, docs/runs.md "Retention and archive").
-- The partition DDL itself (DETACH, DROP) is built in duetime/store/archive.py from a validated
-- partition name: identifiers cannot be bind parameters.

-- name: archive_try_lock
-- One archiver at a time per database: a session-level advisory lock, held by a connection of
-- its own for the whole run and released at its end (or by PostgreSQL if the process dies).
SELECT pg_try_advisory_lock(:key) AS locked;

-- name: archive_unlock
SELECT pg_advisory_unlock(:key) AS unlocked;

-- name: archive_partitions
-- Every partition of runs, by name (runs_pYYYYMMDD, duetime_ensure_runs_partition).
SELECT c.relname AS name
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = CAST('runs' AS regclass)
ORDER BY c.relname;

-- name: archive_partition_summary
-- Rows of one day, those not yet ended, and the latest change: what the export must match
-- when the partition is dropped.
SELECT count(*) AS rows,
       count(*) FILTER (WHERE state IN ('scheduled', 'running')) AS open_runs,
       max(updated_at) AS last_updated_at
FROM runs
WHERE scheduled_for >= :lower AND scheduled_for < :upper;

-- name: archive_runs
SELECT run_id, job_id, tenant, target_service, scheduled_for, due_at, state, attempt,
       max_attempts, worker, progress, last_error, publish_count, throttled_ms, published_at,
       released_at, started_at, finished_at, dead_published_at, created_at, updated_at
FROM runs
WHERE scheduled_for >= :lower AND scheduled_for < :upper
ORDER BY scheduled_for, job_id;

-- name: archive_attempts
SELECT run_id, attempt, worker, started_at, finished_at, outcome, status_code, error, duration_ms
FROM run_attempts_all
WHERE scheduled_for >= :lower AND scheduled_for < :upper
ORDER BY run_id, attempt;

-- name: archive_delete_attempts
DELETE FROM run_attempts WHERE scheduled_for >= :lower AND scheduled_for < :upper;
