-- The occurrence ledger (docs/runs.md, "Did my job run?"). Every occurrence of a job either has a
-- run record (executed, or skipped by the overlap policy) or falls into a gap recorded here: a
-- catch-up policy that left missed occurrences out (catch_up once or skip), the bound of catch_up
-- all (max_catch_up), or a pause. A gap is one row per outage or pause, never one per occurrence:
-- a per-second job paused for a month writes one row. The occurrences in [first_at, end_at) that
-- have no run record are the ones the gap left out; duetime runs list --all-occurrences lists them.
CREATE TABLE occurrence_gaps (
    job_id      text NOT NULL,
    first_at    timestamptz NOT NULL,
    end_at      timestamptz NOT NULL,
    reason      text NOT NULL CHECK (reason IN ('catch_up', 'max_catch_up', 'paused')),
    -- catch_up: the job's policy then (once or skip)
    policy      text CHECK (policy IN ('once', 'all', 'skip')),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, first_at),
    CHECK (first_at < end_at)
);
