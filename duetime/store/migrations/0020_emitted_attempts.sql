-- A run the dispatcher's Kafka fast path emitted (docs/dispatcher.md) ends in one write of its
-- row: run_attempts gets no row for that attempt. Everything such a row held is on the run
-- (attempt, worker, released_at = when it was emitted, finished_at = when the broker
-- acknowledged it, due_at, throttled_ms), so the row cost a heap tuple and two index entries per
-- run for nothing a reader could not have: about an eighth of PostgreSQL's CPU at a steady load.
-- runs.emitted marks such runs, and run_attempts_all is what every reader of attempts reads:
-- the stored attempts, and one synthesised 'succeeded' attempt per emitted run.
ALTER TABLE runs ADD COLUMN emitted boolean NOT NULL DEFAULT false;

CREATE VIEW run_attempts_all AS
SELECT run_id, scheduled_for, attempt, job_id, worker, lease_token, started_at, finished_at,
       outcome, status_code, error, duration_ms, due_at, released_at, throttled_ms
FROM run_attempts
UNION ALL
SELECT run_id, scheduled_for, attempt, job_id, worker, NULL::uuid AS lease_token,
       released_at AS started_at, finished_at, 'succeeded' AS outcome,
       NULL::integer AS status_code, NULL::text AS error,
       GREATEST(0, (extract(epoch FROM finished_at - released_at) * 1000)::bigint) AS duration_ms,
       due_at, released_at, throttled_ms
FROM runs
WHERE emitted;
