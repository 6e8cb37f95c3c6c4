-- The web dashboard's reads beyond the REST API's (duetime/store/dashboard.py), each scoped by
-- the token's tenant like sql/api.sql: :tenant NULL is an admin token, every tenant.

-- name: dashboard_queue_depth
-- Runs waiting and in flight: scheduled and due (not yet started), scheduled ahead, running.
-- Both states have partial indexes (runs_outbox_idx, runs_unclaimed_idx, runs_lease_idx).
SELECT count(*) FILTER (WHERE state = 'scheduled' AND due_at <= now()) AS due_waiting,
       count(*) FILTER (WHERE state = 'scheduled' AND due_at > now()) AS planned_ahead,
       count(*) FILTER (WHERE state = 'running') AS running
FROM runs
WHERE state IN ('scheduled', 'running')
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant);

-- name: dashboard_dead_recent
-- Dead runs scheduled in the last :window_seconds (the bound prunes runs' day partitions).
SELECT count(*) AS runs
FROM runs
WHERE state = 'dead'
  AND scheduled_for >= now() - make_interval(secs => CAST(:window_seconds AS double precision))
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant);

-- name: dashboard_attempts_of_runs
-- Every attempt of the given runs (ids read through a tenant-scoped runs query), in order.
SELECT run_id, attempt, worker, started_at, finished_at, outcome, status_code, error,
       duration_ms
FROM run_attempts_all
WHERE run_id = ANY(CAST(:run_ids AS uuid[]))
ORDER BY run_id, attempt;
