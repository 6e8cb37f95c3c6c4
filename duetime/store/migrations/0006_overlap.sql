-- Overlap policy (docs/flow-control.md, "Overlapping runs"): jobs with overlap skip or
-- buffer_one are locked by the worker's claim while it decides; this index keeps that lookup
-- to the (few) jobs that have a policy at all.
CREATE INDEX jobs_overlap_idx ON jobs (job_id) WHERE overlap <> 'allow';

-- A buffer_one run waiting for the job's running one: when it started waiting. At most one run
-- of a job waits; it is offered again every second until the running one has ended.
ALTER TABLE runs ADD COLUMN buffered_at timestamptz;
