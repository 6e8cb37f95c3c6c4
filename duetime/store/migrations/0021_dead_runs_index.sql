-- Dead runs by scheduled instant: the dashboard counts those of the last day on every view
-- (dashboard_dead_recent), and without an index of its own that was a scan of the day's
-- partitions, hundreds of millions of finished runs in production. Only dead runs have an
-- entry, so the other runs' writes pay for the predicate alone.
CREATE INDEX runs_dead_idx ON runs (scheduled_for) WHERE state = 'dead';
