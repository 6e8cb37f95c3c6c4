-- The planner's sweeper looks for runs that were published but never claimed; without this index
-- that is a scan of every scheduled run in every partition, every few seconds.
CREATE INDEX runs_unclaimed_idx ON runs (due_at) WHERE state = 'scheduled' AND published_at IS NOT NULL;
