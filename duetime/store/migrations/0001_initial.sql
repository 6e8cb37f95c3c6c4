-- duetime schema, version 1: tenants, targets, jobs (hot + cold), runs partitioned by day, attempts.
-- Invariants are constraints: one run per (job_id, scheduled_for); states and policies are CHECKed.

CREATE TABLE tenants (
    tenant          text PRIMARY KEY CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    fairness_weight integer NOT NULL DEFAULT 1 CHECK (fairness_weight BETWEEN 1 AND 1000),
    max_jobs        integer CHECK (max_jobs > 0),
    alert_webhook   text,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE targets (
    target_service  text PRIMARY KEY,
    rate_per_second double precision CHECK (rate_per_second > 0),
    burst           integer CHECK (burst > 0),
    max_in_flight   integer CHECK (max_in_flight > 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    job_id            text PRIMARY KEY CHECK (job_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$'),
    tenant            text NOT NULL DEFAULT 'default',
    shard_id          smallint NOT NULL CHECK (shard_id BETWEEN 0 AND 127),
    schedule_kind     text NOT NULL CHECK (schedule_kind IN ('cron', 'interval', 'at')),
    schedule_expr     text NOT NULL,
    time_zone         text NOT NULL DEFAULT 'UTC',
    dst_gap           text NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('shift', 'skip')),
    dst_overlap       text NOT NULL DEFAULT 'once' CHECK (dst_overlap IN ('once', 'twice')),
    start_at          timestamptz,
    window_ms         bigint NOT NULL DEFAULT 0 CHECK (window_ms >= 0),
    catch_up          text NOT NULL DEFAULT 'once' CHECK (catch_up IN ('once', 'all', 'skip')),
    max_catch_up      integer NOT NULL DEFAULT 100 CHECK (max_catch_up > 0),
    overlap           text NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip', 'buffer_one')),
    target            jsonb NOT NULL,
    target_service    text NOT NULL,
    max_attempts      integer NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    retry_initial_ms  bigint NOT NULL DEFAULT 1000 CHECK (retry_initial_ms > 0),
    retry_multiplier  double precision NOT NULL DEFAULT 2.0 CHECK (retry_multiplier >= 1),
    retry_max_ms      bigint NOT NULL DEFAULT 300000 CHECK (retry_max_ms > 0),
    retry_jitter      double precision NOT NULL DEFAULT 0.2 CHECK (retry_jitter BETWEEN 0 AND 1),
    lease_ms          bigint NOT NULL DEFAULT 60000 CHECK (lease_ms > 0),
    heartbeat_ms      bigint NOT NULL DEFAULT 20000 CHECK (heartbeat_ms > 0 AND heartbeat_ms < lease_ms),
    paused            boolean NOT NULL DEFAULT false,
    next_run_at       timestamptz,
    last_scheduled_for timestamptz,
    version           bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- "Due before T" is a range scan per shard whatever the table size; paused and finished jobs
-- (next_run_at IS NULL) stay out of the index.
CREATE INDEX jobs_due_idx ON jobs (shard_id, next_run_at)
    WHERE NOT paused AND next_run_at IS NOT NULL;
CREATE INDEX jobs_tenant_idx ON jobs (tenant, job_id);

-- Runs: one row per occurrence, partitioned by day (UTC) on scheduled_for.
CREATE TABLE runs (
    run_id            uuid NOT NULL,
    job_id            text NOT NULL,
    tenant            text NOT NULL,
    target_service    text NOT NULL,
    scheduled_for     timestamptz NOT NULL,
    due_at            timestamptz NOT NULL,
    state             text NOT NULL DEFAULT 'scheduled'
        CHECK (state IN ('scheduled', 'running', 'succeeded', 'dead', 'cancelled', 'skipped')),
    attempt           integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts      integer NOT NULL CHECK (max_attempts >= 1),
    lease_token       uuid,
    lease_expires_at  timestamptz,
    worker            text,
    progress          text,
    published_at      timestamptz,
    next_attempt_at   timestamptz,
    last_error        text,
    dead_published_at timestamptz,
    started_at        timestamptz,
    finished_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runs_pkey PRIMARY KEY (run_id, scheduled_for),
    CONSTRAINT runs_job_occurrence_key UNIQUE (job_id, scheduled_for),
    CONSTRAINT runs_attempts_bound CHECK (attempt <= max_attempts),
    CONSTRAINT runs_running_has_lease CHECK (
        state <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
) PARTITION BY RANGE (scheduled_for);

-- The outbox: scheduled runs not yet acknowledged by the broker.
CREATE INDEX runs_outbox_idx ON runs (due_at) WHERE state = 'scheduled' AND published_at IS NULL;
-- The reaper's scan for expired leases.
CREATE INDEX runs_lease_idx ON runs (lease_expires_at) WHERE state = 'running';
-- Dead runs whose alert and dead-topic record are not out yet.
CREATE INDEX runs_dead_outbox_idx ON runs (finished_at)
    WHERE state = 'dead' AND dead_published_at IS NULL;
CREATE INDEX runs_job_idx ON runs (job_id, scheduled_for DESC);

CREATE TABLE run_attempts (
    run_id        uuid NOT NULL,
    scheduled_for timestamptz NOT NULL,
    attempt       integer NOT NULL CHECK (attempt >= 1),
    job_id        text NOT NULL,
    worker        text NOT NULL,
    lease_token   uuid NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    outcome       text CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'fenced')),
    status_code   integer,
    error         text,
    duration_ms   bigint,
    PRIMARY KEY (run_id, attempt)
);
CREATE INDEX run_attempts_job_idx ON run_attempts (job_id, started_at DESC);

-- Completions that arrived with a lease token that no longer matched (fencing evidence, I3).
CREATE TABLE run_fenced_completions (
    run_id        uuid NOT NULL,
    attempt       integer NOT NULL,
    worker        text NOT NULL,
    lease_token   uuid NOT NULL,
    outcome       text NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now()
);

-- Create (if missing) the runs partition holding the UTC day of `day`. Safe to call concurrently.
CREATE FUNCTION duetime_ensure_runs_partition(day date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    name text := format('runs_p%s', to_char(day, 'YYYYMMDD'));
    lower_bound timestamptz := (day::timestamp AT TIME ZONE 'UTC');
    upper_bound timestamptz := ((day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    IF to_regclass(name) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF runs FOR VALUES FROM (%L) TO (%L)',
                           name, lower_bound, upper_bound);
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
            NULL;  -- another session created it first
        END;
    END IF;
    RETURN name;
END;
$$;
