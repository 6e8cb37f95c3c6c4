-- Flow control (docs/flow-control.md): per-target limits that hold across dispatcher instances.
--
-- The rate limit is a token bucket kept in the target's row: a dispatcher takes tokens in
-- slices under the row's lock (tokens refill at rate_per_second up to burst, by the database
-- clock), so any number of dispatchers share one limit.
ALTER TABLE targets
    ADD COLUMN tokens      double precision,
    ADD COLUMN refilled_at timestamptz,
    ADD COLUMN updated_at  timestamptz NOT NULL DEFAULT now();

-- The in-flight limit: one slot per released attempt of a target with max_in_flight. A slot
-- counts while its run is still on its way (scheduled, one attempt behind the slot) or running
-- that attempt; it stops counting by itself when the attempt ends, however it ends (success,
-- failure, lease expiry, cancellation), so no slot leaks when a worker or a dispatcher dies.
-- Slots that stopped counting are deleted by the next grant for their target. The row
-- ``target_service = '*'`` of ``targets`` holds the limits of every target without its own.
CREATE TABLE target_slots (
    target_service text NOT NULL,
    run_id         uuid NOT NULL,
    attempt        integer NOT NULL CHECK (attempt >= 1),
    granted_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target_service, run_id, attempt)
);

-- Lateness is accounted, not hidden: when the dispatcher released the attempt now running (or
-- last run), and how long throttling held it past its due instant.
ALTER TABLE runs
    ADD COLUMN released_at timestamptz,
    ADD COLUMN throttled_ms bigint CHECK (throttled_ms >= 0);

-- Runs waiting in a dispatcher's throttle right now, per target and dispatcher (for
-- `duetime targets list`); rows older than a few seconds are from dispatchers gone quiet.
CREATE TABLE target_waiting (
    target_service text NOT NULL,
    dispatcher     text NOT NULL,
    waiting        integer NOT NULL CHECK (waiting >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target_service, dispatcher)
);
