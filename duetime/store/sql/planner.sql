-- Named queries of the planner's bulk paths: one statement per batch, never one per job or run.
-- A batch travels as ONE json parameter (an array of row objects, or of keys) expanded with
-- json_to_recordset() / json_array_elements_text(), not as one array parameter per column: the
-- driver quotes array elements one by one in Python (measured ~20 s for 100k jobs), while the C
-- JSON encoder builds the same batch in well under a second. Types are declared in the
-- recordset's column list, so nothing depends on how the driver guesses them.

-- name: jobs_get_versions
-- With each job's tenant: a write that moves a job to another tenant counts for the new one.
SELECT job_id, version, tenant FROM jobs
WHERE job_id = ANY(ARRAY(SELECT json_array_elements_text(CAST(:job_ids AS json))));

-- name: jobs_upsert_many
-- The bulk form of jobs_upsert (queries.sql), same rules: an older or equal version never overwrites a newer
-- definition; next_run_at changes only when the schedule changed. A job_id may appear only once
-- per statement (ON CONFLICT cannot touch a row twice); jobs_apply resolves duplicates first.
-- A job whose next run lies beyond :hot_horizon_s is written cold (duetime_cold_bucket,
-- migration 0015); a kept next_run_at keeps its bucket.
-- A column whose value is the same in every row of the batch travels once, in :shared, and is
-- absent from :rows (rows.batch_json_shared): json_populate_recordset takes a column a row lacks
-- from its base record, which is :shared read as a jobs row. Each column is in exactly one of the
-- two, so a NULL in either is kept. Jobs that share their defaults send a quarter of the JSON.
INSERT INTO jobs AS j (
    job_id, tenant, shard_id, schedule_kind, schedule_expr, time_zone, dst_gap, dst_overlap,
    start_at, window_ms, catch_up, max_catch_up, overlap, target, target_service, max_attempts,
    retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter, lease_ms, heartbeat_ms, paused,
    next_run_at, version, cold_bucket)
SELECT u.job_id, u.tenant, u.shard_id, u.schedule_kind, u.schedule_expr, u.time_zone, u.dst_gap,
       u.dst_overlap, u.start_at, u.window_ms, u.catch_up, u.max_catch_up, u.overlap, u.target,
       u.target_service, u.max_attempts, u.retry_initial_ms, u.retry_multiplier, u.retry_max_ms,
       u.retry_jitter, u.lease_ms, u.heartbeat_ms, u.paused, u.next_run_at, u.version,
       duetime_cold_bucket(u.next_run_at,
                           now() + make_interval(secs => CAST(:hot_horizon_s AS double precision)))
FROM json_populate_recordset(json_populate_record(NULL::jobs, CAST(:shared AS json)),
                             CAST(:rows AS json)) AS u
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
    cold_bucket = CASE
        WHEN (j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap, j.dst_overlap,
              j.start_at) IS DISTINCT FROM
             (EXCLUDED.schedule_kind, EXCLUDED.schedule_expr, EXCLUDED.time_zone,
              EXCLUDED.dst_gap, EXCLUDED.dst_overlap, EXCLUDED.start_at)
        THEN EXCLUDED.cold_bucket
        ELSE j.cold_bucket END,
    version = EXCLUDED.version,
    updated_at = now()
WHERE j.version < EXCLUDED.version
RETURNING j.job_id, (j.xmax = 0) AS inserted;

-- name: jobs_delete_many
-- Tombstones: a job is removed only by a newer version than the stored one.
DELETE FROM jobs j
USING json_to_recordset(CAST(:rows AS json)) AS d(job_id text, version bigint)
WHERE j.job_id = d.job_id AND j.version < d.version
RETURNING j.job_id;

-- name: jobs_get_due_batch
-- The planner's scan (jobs_get_due), shaped for large batches: the keys of the oldest due jobs
-- are picked first (a top-N sort of keys), then those rows are locked, skipping rows another
-- planner holds. Locking in the same query level as the ORDER BY would sort every due row in
-- full before LIMIT (LockRows sits between them): measured 0.4 s per 5000-job batch with 100k
-- due. :pick is larger than :limit so that rows locked elsewhere do not leave the batch short.
-- Hot rows only (cold_bucket IS NULL, the due index's predicate): far-future jobs are cold.
-- The columns in the order of rows.DUE_BATCH_COLUMNS (checked by the store): where the job
-- stands, then its definition, which the planner compares with the one it parsed last time
-- (rows.DueJobReader) as one slice of the row; the target as text for that compare.
SELECT job_id, next_run_at, last_scheduled_for, shard_id, tenant, schedule_kind, schedule_expr,
       time_zone, dst_gap, dst_overlap, start_at, window_ms, catch_up, max_catch_up,
       target_service, max_attempts, CAST(target AS text) AS target, lease_ms, heartbeat_ms,
       retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter
FROM jobs
WHERE job_id = ANY(ARRAY(
        SELECT job_id FROM jobs
        WHERE shard_id = ANY(:shards) AND NOT paused AND next_run_at IS NOT NULL
          AND cold_bucket IS NULL AND next_run_at <= :horizon
        ORDER BY next_run_at
        LIMIT :pick))
  AND NOT paused AND next_run_at IS NOT NULL AND cold_bucket IS NULL AND next_run_at <= :horizon
ORDER BY next_run_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: jobs_advance_many
-- The planner moves every planned job of a batch in one statement. With :tokens (etcd mode,
-- sql/shards.sql) only jobs of shards whose stored fencing token is the one given move: the
-- database, not the planner, refuses a write under a token a newer owner has replaced. A job
-- whose next run lies beyond :hot_horizon_s goes cold (a daily job after its run, for example).
UPDATE jobs j SET next_run_at = u.next_run_at,
                  cold_bucket = duetime_cold_bucket(
                      u.next_run_at,
                      now() + make_interval(secs => CAST(:hot_horizon_s AS double precision))),
                  last_scheduled_for = COALESCE(u.last_scheduled_for, j.last_scheduled_for),
                  updated_at = now()
FROM json_to_recordset(CAST(:rows AS json))
     AS u(job_id text, next_run_at timestamptz, last_scheduled_for timestamptz)
WHERE j.job_id = u.job_id
  AND (CAST(:tokens AS text) IS NULL
       OR j.shard_id IN (SELECT o.shard_id FROM shard_owners o
                         JOIN json_to_recordset(CAST(:tokens AS json))
                              AS t(shard_id smallint, token bigint)
                           ON t.shard_id = o.shard_id AND t.token = o.token));

-- name: jobs_due_histogram
-- Jobs due before :horizon per time bucket (bucket end, jobs), the earliest :cap of them: the
-- planner widens its lookahead when a spike is coming (planning.lookahead_for). An index range
-- scan of the due index, bounded by :cap.
SELECT date_bin(make_interval(secs => CAST(:bucket_seconds AS double precision)), next_run_at,
                TIMESTAMPTZ '2000-01-01 00:00:00+00')
       + make_interval(secs => CAST(:bucket_seconds AS double precision)) AS bucket_end,
       count(*) AS jobs
FROM (
    SELECT next_run_at FROM jobs
    WHERE shard_id = ANY(:shards) AND NOT paused AND next_run_at IS NOT NULL
      AND cold_bucket IS NULL AND next_run_at <= :horizon
    ORDER BY next_run_at
    LIMIT :cap
) AS ahead
GROUP BY 1
ORDER BY 1;

-- name: runs_insert_many
-- Unlike the other statements here, the batch travels column by column: array literals for the
-- uuids, instants, numbers and flags (duetime/store/arrays.py: one join each, no per-row
-- object), JSON arrays for the text columns (any text, quoted by the C encoder); at 10,000 runs
-- a batch that halved the planner's time building it (~45 to ~24 ms).
-- Returns the runs it created: the planner publishes those at once (an existing run is the
-- outbox's business). With :tokens (etcd mode) a run is inserted only if its job's shard still
-- has the given fencing token (as jobs_advance_many); a refused run is simply not returned.
-- A row with "published" true is inserted already marked published, provisionally: with
-- :planner set, one run_publications row holding the keys of those created is written by the
-- same statement, and its id is returned on every row (migrations/0019_run_publications.sql).
WITH created AS (
    INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at,
                      max_attempts, published_at, publish_count)
    SELECT u.run_id, u.job_id, u.tenant, u.target_service, u.scheduled_for, u.due_at,
           u.max_attempts, CASE WHEN u.published THEN now() END,
           CASE WHEN u.published THEN 1 ELSE 0 END
    FROM unnest(CAST(:run_ids AS uuid[]), CAST(:scheduled_fors AS timestamptz[]),
                CAST(:due_ats AS timestamptz[]), CAST(:max_attempts AS integer[]),
                CAST(:shard_ids AS smallint[]), CAST(:published AS boolean[]),
                ARRAY(SELECT e.v FROM json_array_elements_text(CAST(:job_ids AS json))
                                      WITH ORDINALITY AS e(v, n) ORDER BY e.n),
                ARRAY(SELECT e.v FROM json_array_elements_text(CAST(:tenants AS json))
                                      WITH ORDINALITY AS e(v, n) ORDER BY e.n),
                ARRAY(SELECT e.v FROM json_array_elements_text(CAST(:target_services AS json))
                                      WITH ORDINALITY AS e(v, n) ORDER BY e.n))
         AS u(run_id, scheduled_for, due_at, max_attempts, shard_id, published, job_id, tenant,
              target_service)
    WHERE CAST(:tokens AS text) IS NULL
       OR u.shard_id IN (SELECT o.shard_id FROM shard_owners o
                         JOIN json_to_recordset(CAST(:tokens AS json))
                              AS t(shard_id smallint, token bigint)
                           ON t.shard_id = o.shard_id AND t.token = o.token)
    ON CONFLICT DO NOTHING
    RETURNING run_id, scheduled_for, published_at IS NOT NULL AS published
), publication AS (
    INSERT INTO run_publications (planner, run_ids, scheduled_fors)
    SELECT CAST(:planner AS text), array_agg(run_id), array_agg(scheduled_for)
    FROM created
    WHERE published
    HAVING count(*) > 0 AND CAST(:planner AS text) IS NOT NULL
    RETURNING publication_id
)
SELECT created.run_id, (SELECT publication_id FROM publication) AS publication_id
FROM created;

-- name: runs_unmark_published
-- Runs whose mark the broker did not confirm (a publication's unacknowledged runs, or those of a
-- publication nobody settled) lose it, so the outbox publishes them again. A run another
-- transaction is writing is skipped (the dispatcher recording it as emitted: its record arrived
-- after all). Rows are locked first, as in runs_mark_published_many.
WITH locked AS (
    SELECT r.run_id, r.scheduled_for
    FROM json_to_recordset(CAST(:rows AS json)) AS k(run_id uuid, scheduled_for timestamptz)
    JOIN runs r ON r.run_id = k.run_id AND r.scheduled_for = k.scheduled_for
    WHERE r.state = 'scheduled' AND r.published_at IS NOT NULL
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE runs r SET published_at = NULL, updated_at = now()
FROM locked
WHERE r.run_id = locked.run_id AND r.scheduled_for = locked.scheduled_for;

-- name: publication_delete
-- The broker answered for a publication (its unconfirmed runs were unmarked first).
DELETE FROM run_publications WHERE publication_id = :publication_id;

-- name: publications_take_stale
-- Publications no planner settled within :after_s seconds of their commit (their planner died
-- or lost the database while waiting for the broker): removed and returned, for their runs to be
-- unmarked in the same transaction (runs_unmark_published). At most :limit a call; one another
-- planner is taking is skipped.
DELETE FROM run_publications
WHERE publication_id IN (
    SELECT publication_id FROM run_publications
    WHERE created_at < now() - make_interval(secs => CAST(:after_s AS double precision))
    ORDER BY publication_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED)
RETURNING run_ids, scheduled_fors;

-- name: runs_mark_published_many
-- Only what the broker acknowledged; publish_count feeds the sweeper's exponential grace.
-- A row another transaction is writing is skipped rather than waited for (the dispatcher
-- recording a swept run's re-publication as emitted locks rows in its own order: waiting was a
-- deadlock). Left unmarked, it is published again later, a copy the dispatcher drops.
-- The locked rows' state was re-checked when they were locked, so the UPDATE joins on the key
-- alone (with the state predicates there too, the planner chose the outbox index for every row).
WITH u AS (
    SELECT r.run_id, r.scheduled_for
    FROM json_to_recordset(CAST(:rows AS json)) AS k(run_id uuid, scheduled_for timestamptz)
    JOIN runs r ON r.run_id = k.run_id AND r.scheduled_for = k.scheduled_for
    WHERE r.state = 'scheduled' AND r.published_at IS NULL
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE runs r SET published_at = now(), publish_count = r.publish_count + 1, updated_at = now()
FROM u
WHERE r.run_id = u.run_id AND r.scheduled_for = u.scheduled_for;

-- name: runs_cancel_orphans
-- Unpublished runs of deleted jobs are cancelled, one statement per outbox batch.
UPDATE runs r SET state = 'cancelled', finished_at = now(), last_error = 'job deleted',
                  updated_at = now()
FROM json_to_recordset(CAST(:rows AS json)) AS u(run_id uuid, scheduled_for timestamptz)
WHERE r.run_id = u.run_id AND r.scheduled_for = u.scheduled_for AND r.state = 'scheduled';

-- name: runs_sweep_lost
-- The sweeper (docs/planner.md has the rule and why): a run published but not claimed is made
-- publishable again only when it is plausibly lost, never because it waits in a healthy backlog.
-- Candidates: due more than :grace_seconds ago and published longer ago than the grace doubled
-- per earlier publication (capped at :max_grace_seconds). A candidate is lost when, in its group
-- (target_service, tenant: the dispatcher's throttling and fairness keys, so FIFO holds inside
-- it, up to the spread between consumers), the pipeline moved past it (a run due more than
-- :margin_seconds plus the head's own lateness after it was claimed) or stalled (nothing of the
-- group claimed for :grace_seconds, or never). At most :limit per round.
WITH candidates AS (
    SELECT run_id, scheduled_for, due_at, target_service, tenant
    FROM runs
    WHERE state = 'scheduled' AND published_at IS NOT NULL
      AND due_at < now() - make_interval(secs => CAST(:grace_seconds AS double precision))
      AND published_at < now() - make_interval(secs => least(
              CAST(:grace_seconds AS double precision) * power(2, greatest(publish_count - 1, 0)),
              CAST(:max_grace_seconds AS double precision)))
    ORDER BY due_at
    LIMIT :scan_limit
), heads AS MATERIALIZED (
    -- Materialized: each group's head is looked up once. Inlined, the planner joined the
    -- candidates to their groups first and ran the lookup once per candidate (10,000 index
    -- descents a round under a backlog: 1.9 s a round at a steady 5,000 HTTP runs/s).
    SELECT g.target_service, g.tenant, h.due_at AS head_due_at, h.started_at AS head_started_at
    FROM (SELECT DISTINCT target_service, tenant FROM candidates) AS g
    LEFT JOIN LATERAL (
        SELECT c.due_at, c.started_at FROM runs c
        WHERE c.target_service = g.target_service AND c.tenant = g.tenant
          AND c.started_at IS NOT NULL AND c.state <> 'scheduled' AND c.due_at <= now()
        ORDER BY c.due_at DESC, c.started_at DESC
        LIMIT 1
    ) AS h ON true
), lost AS (
    SELECT c.run_id, c.scheduled_for,
           CASE WHEN h.head_due_at > c.due_at + h.margin
                THEN 'moved_past' ELSE 'stalled' END AS reason
    FROM candidates c JOIN (
        -- The margin grows with how late the head itself started: the group's records are
        -- spread over partitions and consumers, and in a backlog L seconds deep one consumer
        -- can be seconds behind another (measured: 2,489 waiting runs of a steady overload
        -- re-published as moved past with a fixed 10 s margin, the workers ~50 s behind).
        SELECT heads.*, make_interval(secs => CAST(:margin_seconds AS double precision))
                        + greatest(head_started_at - head_due_at, interval '0') AS margin
        FROM heads
    ) h USING (target_service, tenant)
    WHERE h.head_due_at IS NULL
       OR h.head_due_at > c.due_at + h.margin
       OR h.head_started_at < now() - make_interval(
              secs => CAST(:grace_seconds AS double precision))
    ORDER BY c.due_at
    LIMIT :limit
), locked AS (
    -- Rows another transaction is writing (the dispatcher recording emitted runs, a worker's
    -- claim) are skipped, not waited for: the sweeper waiting on such a batch while that batch
    -- waits on a row the sweeper already locked was a deadlock (seen under a steady load).
    SELECT r.run_id, r.scheduled_for, lost.reason
    FROM runs r JOIN lost ON r.run_id = lost.run_id AND r.scheduled_for = lost.scheduled_for
    WHERE r.state = 'scheduled' AND r.published_at IS NOT NULL
    FOR UPDATE OF r SKIP LOCKED
)
-- (state re-checked at the lock: the UPDATE joins on the key alone, by the primary key)
UPDATE runs r SET published_at = NULL, updated_at = now()
FROM locked
WHERE r.run_id = locked.run_id AND r.scheduled_for = locked.scheduled_for
RETURNING r.run_id, locked.reason;

-- name: jobs_estimated_rows
-- How many rows the query planner believes jobs holds (-1 before the first ANALYZE).
SELECT CAST(reltuples AS bigint) AS estimated FROM pg_class WHERE oid = CAST('jobs' AS regclass);

-- name: jobs_analyze
-- Fresh statistics right after a bulk write: until autovacuum gets to it (up to a minute), the
-- planner's due scan is planned for the table as it was (measured: 20 s per batch instead of
-- 0.6 s after 100k jobs landed in an empty table).
ANALYZE jobs;

-- name: occurrence_gaps_insert
-- The missed occurrences a catch-up policy left out, one row per job and outage, written in the
-- planning transaction with the same fence as the runs (sql/shards.sql): a planner that lost the
-- shard records nothing. A replayed round finds its rows there already.
INSERT INTO occurrence_gaps (job_id, first_at, end_at, reason, policy)
SELECT u.job_id, u.first_at, u.end_at, u.reason, u.policy
FROM json_to_recordset(CAST(:rows AS json)) AS u(
    job_id text, first_at timestamptz, end_at timestamptz, reason text, policy text,
    shard_id smallint)
WHERE CAST(:tokens AS text) IS NULL
   OR u.shard_id IN (SELECT o.shard_id FROM shard_owners o
                     JOIN json_to_recordset(CAST(:tokens AS json))
                          AS t(shard_id smallint, token bigint)
                       ON t.shard_id = o.shard_id AND t.token = o.token)
ON CONFLICT DO NOTHING;
