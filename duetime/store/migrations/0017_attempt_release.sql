-- Lateness and throttled time per attempt (docs/runs.md): the run row keeps only the latest
-- attempt's released_at and throttled_ms, and a retry moves its due_at, so after a retry the
-- earlier attempts' figures were lost. Each attempt row now keeps the instant it was due, when
-- the dispatcher released it and how long throttling held it. NULL: not recorded (attempts
-- written before this migration, or a record that carried no release stamps).
ALTER TABLE run_attempts
    ADD COLUMN due_at timestamptz,
    ADD COLUMN released_at timestamptz,
    ADD COLUMN throttled_ms bigint CHECK (throttled_ms >= 0);
