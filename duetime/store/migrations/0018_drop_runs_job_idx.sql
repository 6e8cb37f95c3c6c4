-- runs_job_idx (job_id, scheduled_for DESC) repeated the unique key runs_job_occurrence_key
-- (job_id, scheduled_for): a btree is read backwards as cheaply as forwards, so the key serves
-- every "runs of a job, newest first" query. Each write of a run (insert, publish mark, start,
-- end: none of them a HOT update, since each changes a column a partial index reads) added an
-- entry to both; measured on the 2-core machine, the insert, publish mark and recorded success
-- of a run cost about 10 % less PostgreSQL CPU without it.
DROP INDEX IF EXISTS runs_job_idx;
