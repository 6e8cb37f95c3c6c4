-- Tenants (docs/flow-control.md, "Tenants"): fairness weights and job quotas.

-- name: tenants_lock_quotas
-- The rows of the tenants a job write may add jobs to, those with a quota only, locked in name
-- order (two writers never wait on each other in a cycle) until the write commits: writers
-- adding jobs to one tenant take turns, so their counts cannot both pass. A tenant without a
-- quota costs no lock.
SELECT tenant, max_jobs
FROM tenants
WHERE tenant = ANY(:tenants) AND max_jobs IS NOT NULL
ORDER BY tenant
FOR UPDATE;

-- name: jobs_count_by_tenant
-- Run after tenants_lock_quotas, as a statement of its own: under READ COMMITTED it reads a
-- snapshot taken after the lock was granted, so it sees every job the previous holder wrote.
-- An index-only scan of jobs_tenant_idx.
SELECT tenant, count(*) AS jobs
FROM jobs
WHERE tenant = ANY(:tenants)
GROUP BY tenant;

-- name: tenants_set
-- Creates the row or changes what is given: :weight NULL keeps the weight; :max_jobs is written
-- only when :set_max_jobs (NULL then removes the quota). Returns the row and its jobs now.
INSERT INTO tenants AS t (tenant, fairness_weight, max_jobs)
VALUES (:tenant, COALESCE(CAST(:weight AS integer), 1), CAST(:max_jobs AS integer))
ON CONFLICT (tenant) DO UPDATE SET
    fairness_weight = COALESCE(CAST(:weight AS integer), t.fairness_weight),
    max_jobs = CASE WHEN CAST(:set_max_jobs AS boolean) THEN EXCLUDED.max_jobs
                    ELSE t.max_jobs END
RETURNING t.tenant, t.fairness_weight, t.max_jobs,
          (SELECT count(*) FROM jobs j WHERE j.tenant = t.tenant) AS jobs;

-- name: tenants_overview
-- `duetime tenants list`: every tenant with a row or with jobs (those without a row weigh 1 and
-- have no quota), and its jobs now. Counts every job once (an index-only scan of
-- jobs_tenant_idx): seconds for tens of millions of jobs.
SELECT COALESCE(t.tenant, c.tenant) AS tenant,
       COALESCE(t.fairness_weight, 1) AS fairness_weight,
       t.max_jobs,
       COALESCE(c.jobs, 0) AS jobs
FROM tenants t
FULL JOIN (SELECT tenant, count(*) AS jobs FROM jobs GROUP BY tenant) AS c
     ON c.tenant = t.tenant
ORDER BY 1;
