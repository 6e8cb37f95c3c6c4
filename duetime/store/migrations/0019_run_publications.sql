-- The planner's publications in flight (docs/planner.md, "Publishing"). A planning round inserts
-- the runs it is about to publish already marked published (published_at, publish_count 1) and,
-- in the same transaction, one row here holding their keys: the mark is provisional while the
-- row exists. Once the broker acknowledged every record the row is deleted (one statement per
-- batch instead of an update of every run: that update was about a fifth of PostgreSQL's CPU at
-- a steady load); runs it did not acknowledge are unmarked first, so the outbox publishes them
-- again. A row its planner never settled (the planner died, or lost the database, between the
-- commit and the acknowledgements) is recovered by any planner once it is older than the
-- publish timeout allows: its runs still scheduled are unmarked and go through the outbox.
-- A run counts as published when published_at is set and no row here holds it.
CREATE TABLE run_publications (
    publication_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    planner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    run_ids uuid[] NOT NULL,
    scheduled_fors timestamptz[] NOT NULL,
    CONSTRAINT run_publications_keys CHECK (
        cardinality(run_ids) = cardinality(scheduled_fors) AND cardinality(run_ids) > 0)
);
