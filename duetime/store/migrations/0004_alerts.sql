-- Alerts: a queue of webhook deliveries, one row per alert ever raised (docs/runs.md, "Alerts").
-- (kind, subject) is unique, so raising an alert twice (a reaper round repeated after a crash, two
-- reapers) enqueues it once: a dead run's subject is its run_id, a condition's is its episode.
-- next_attempt_at NULL means "due now"; while a sender holds a claim it is the claim's expiry.
CREATE TABLE alerts (
    alert_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text NOT NULL
        CHECK (kind IN ('run.dead', 'outbox.backlog', 'ready.lag', 'release.lateness')),
    subject         text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    tenant          text,
    payload         jsonb NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'delivered', 'failed', 'unrouted')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT alerts_dedup_key UNIQUE (kind, subject),
    CONSTRAINT alerts_delivered_has_time CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
);
-- The sender's scan: pending alerts by when they are due (never-tried ones first).
CREATE INDEX alerts_due_idx ON alerts (next_attempt_at NULLS FIRST) WHERE state = 'pending';

-- One row per condition alert kind: whether it is firing, its episode (a firing and its
-- resolution share one), and since when the measurement has disagreed with that state.
CREATE TABLE alert_conditions (
    kind          text PRIMARY KEY
        CHECK (kind IN ('outbox.backlog', 'ready.lag', 'release.lateness')),
    firing        boolean NOT NULL DEFAULT false,
    episode       integer NOT NULL DEFAULT 0 CHECK (episode >= 0),
    pending_since timestamptz,
    value         double precision,
    checked_at    timestamptz
);

-- Release lateness of first attempts by due time (the reaper's p99 over the last minute). Runs
-- not yet started are found through the outbox and unclaimed indexes.
CREATE INDEX runs_first_start_idx ON runs (due_at) WHERE attempt = 1 AND state <> 'scheduled';
