-- The sweeper re-publishes only runs that are plausibly lost (docs/planner.md).
-- publish_count: how many times the outbox published the run; the sweeper's grace doubles with it,
-- so a run that keeps going missing is re-published ever more rarely instead of in a storm.
ALTER TABLE runs ADD COLUMN publish_count integer NOT NULL DEFAULT 0
    CONSTRAINT runs_publish_count_check CHECK (publish_count >= 0);

-- The head of each (target_service, tenant) group: the latest-due run that was claimed. The
-- sweeper compares a waiting run with it ("the pipeline moved past it" / "the group stalled")
-- with one index probe per group instead of a scan of the backlog.
CREATE INDEX runs_claimed_head_idx ON runs (target_service, tenant, due_at DESC, started_at DESC)
    WHERE started_at IS NOT NULL;
