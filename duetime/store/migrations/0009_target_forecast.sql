-- Capacity-aware windows (docs/flow-control.md): runs planned per target and second, for targets
-- with a rate limit. The planner places windowed runs where this forecast is below the rate and
-- adds every run it plans for such a target; seconds in the past are pruned.
CREATE TABLE target_forecast (
    target_service text NOT NULL,
    second         bigint NOT NULL,  -- Unix epoch second
    runs           integer NOT NULL CHECK (runs >= 0),
    PRIMARY KEY (target_service, second)
);
