-- An attempt a stopping worker hands back (docs/workers.md, "Stopping: in-flight runs are handed
-- back"): it ends with the outcome 'handed_back' and the run is due again at once, instead of
-- waiting for its lease to lapse.
ALTER TABLE run_attempts DROP CONSTRAINT run_attempts_outcome_check;
ALTER TABLE run_attempts ADD CONSTRAINT run_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'fenced', 'handed_back'));
