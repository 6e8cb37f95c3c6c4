-- The cold tier (docs/planner.md, "The cold tier"; duetime/cold_tier.py has the rules). A job
-- whose next run lies beyond the hot horizon (default 1 h) keeps its row in jobs, with the UTC
-- hour bucket of that next run in cold_bucket; the due index covers hot rows only (cold_bucket IS
-- NULL), so the planner's due scan and its lookahead probe never touch far-future jobs, whatever
-- their number. The planner's loader makes each coming bucket hot ahead of time (cold_bucket set
-- to NULL, one transaction per bucket, fenced by the shard tokens like the planner's writes).
--
-- A flag on jobs rather than a table of its own: every reader of a job (API, dashboard, CLI,
-- ingest) keeps reading one row, and moving a bucket hot rewrites one column instead of moving
-- whole rows between tables.

-- The UTC hour a next run falls in: the grid of duetime/cold_tier.py (origin 2000-01-01Z).
CREATE FUNCTION duetime_hour_bucket(instant timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT date_bin(interval '1 hour', instant, timestamptz '2000-01-01 00:00:00+00') $$;

-- The bucket a job is written cold in, or NULL when it is hot: cold when the bucket of its next
-- run starts at or after hot_from (the writer's now() + hot horizon), the instant before which
-- the loader has already loaded every bucket. Every statement that writes next_run_at uses it.
-- (The grid of duetime_hour_bucket, written out: a body that calls no other function of ours
-- does not depend on the search_path; a body of one expression without FROM is inlined into the
-- statements that call it, so it costs no function call per row.)
CREATE FUNCTION duetime_cold_bucket(next_run_at timestamptz, hot_from timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE
         WHEN date_bin(interval '1 hour', next_run_at, timestamptz '2000-01-01 00:00:00+00')
              >= hot_from
         THEN date_bin(interval '1 hour', next_run_at, timestamptz '2000-01-01 00:00:00+00')
       END $$;

ALTER TABLE jobs ADD COLUMN cold_bucket timestamptz;

-- A cold row's bucket is always its next run's: a writer that moves next_run_at without moving
-- the bucket (a hand-written UPDATE) is refused instead of leaving the job invisible to the due
-- scan until a wrong hour. With it, any cold job is loaded by the first loader round after its
-- bucket comes within the horizon.
ALTER TABLE jobs ADD CONSTRAINT jobs_cold_bucket_check CHECK (
    cold_bucket IS NULL
    OR (next_run_at IS NOT NULL AND cold_bucket = duetime_hour_bucket(next_run_at)));

-- Jobs already stored go cold by the default horizon (a deployment with a longer one loads the
-- nearest of them back on the loader's first round).
UPDATE jobs SET cold_bucket = duetime_cold_bucket(next_run_at, now() + interval '1 hour')
WHERE next_run_at IS NOT NULL
  AND duetime_cold_bucket(next_run_at, now() + interval '1 hour') IS NOT NULL;

-- The hot due index: the near future only.
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (shard_id, next_run_at)
    WHERE NOT paused AND next_run_at IS NOT NULL AND cold_bucket IS NULL;

-- The loader's index: the cold rows by bucket (then shard, for a planner that owns some).
CREATE INDEX jobs_cold_idx ON jobs (cold_bucket, shard_id) WHERE cold_bucket IS NOT NULL;
