-- The dispatcher's statements. Its Kafka fast path emits a Kafka target's record itself at the
-- due instant; it records those successes afterwards, many runs per statement.

-- name: runs_emitted
-- Record attempt n of each run as succeeded, emitted by the dispatcher. Only a run still
-- 'scheduled' with n - 1 attempts behind it matches: a run a worker already claimed or ended,
-- or that this statement already recorded (a retry after a lost reply, a duplicate emission),
-- is left alone. One write per run: the attempt is the run itself (emitted = true; readers see
-- it in run_attempts_all, migrations/0020_emitted_attempts.sql). Returns the runs it recorded.
WITH req AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:scheduled_fors AS timestamptz[]),
                         CAST(:attempts AS integer[]), CAST(:started_ats AS timestamptz[]),
                         CAST(:finished_ats AS timestamptz[]), CAST(:throttled_ms AS bigint[]))
        AS t(run_id, scheduled_for, attempt, started_at, finished_at, throttled_ms)
)
UPDATE runs r SET state = 'succeeded', attempt = req.attempt, worker = :worker, emitted = true,
                  lease_token = NULL, lease_expires_at = NULL, progress = NULL,
                  next_attempt_at = NULL, last_error = NULL,
                  started_at = COALESCE(r.started_at, req.started_at),
                  finished_at = req.finished_at,
                  released_at = req.started_at, throttled_ms = req.throttled_ms,
                  published_at = COALESCE(r.published_at, now()), updated_at = now()
FROM req
WHERE r.run_id = req.run_id AND r.scheduled_for = req.scheduled_for
  AND r.state = 'scheduled' AND r.attempt = req.attempt - 1
RETURNING r.run_id::text AS run_id, r.attempt;

-- name: runs_handled
-- Of the given attempts (run n of each), those whose run is already past them: no longer
-- 'scheduled' with n - 1 attempts behind it (claimed by a worker, ended, retried, or recorded as
-- emitted). The dispatcher drops such a record when it reads it late, typically again after a
-- restart, instead of emitting it a second time. A run without a row is not returned.
SELECT r.run_id, req.attempt
FROM unnest(CAST(:run_ids AS uuid[]), CAST(:scheduled_fors AS timestamptz[]),
            CAST(:attempts AS integer[])) AS req(run_id, scheduled_for, attempt)
JOIN runs r ON r.run_id = req.run_id AND r.scheduled_for = req.scheduled_for
WHERE NOT (r.state = 'scheduled' AND r.attempt = req.attempt - 1);

-- name: db_clock
-- The database clock as it is while the statement runs (not the transaction's start): the
-- dispatcher brackets it with its own clock to bound its offset from the database.
SELECT clock_timestamp() AS now;
