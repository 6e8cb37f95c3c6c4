-- The web dashboard's reads beyond the REST API's (duetime/store/dashboard.py), each scoped by
-- the token's tenant like sql/api.sql: :tenant NULL is an admin token, every tenant.

-- name: dashboard_queue_depth
-- Runs waiting and in flight: scheduled and due (not yet started), scheduled ahead, running.
-- One count per partial index (runs_outbox_idx, runs_unclaimed_idx, runs_lease_idx), so the
-- cost follows the runs waiting and in flight, not the day's partition: a condition on `state`
-- alone matches none of them and was a scan of every partition.
WITH waiting AS (
    SELECT due_at <= now() AS due FROM runs
    WHERE state = 'scheduled' AND published_at IS NULL
      AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
    UNION ALL
    SELECT due_at <= now() AS due FROM runs
    WHERE state = 'scheduled' AND published_at IS NOT NULL
      AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
)
SELECT (SELECT count(*) FROM waiting WHERE due) AS due_waiting,
       (SELECT count(*) FROM waiting WHERE NOT due) AS planned_ahead,
       (SELECT count(*) FROM runs
        WHERE state = 'running' AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant))
           AS running;

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
