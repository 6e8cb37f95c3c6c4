-- Flow control (docs/flow-control.md): per-target limits shared by every dispatcher.

-- name: targets_lock
-- The rows of the requested targets and of the default '*', locked in a fixed order (no
-- deadlock between dispatchers), with the database clock the grant is judged by.
SELECT target_service, rate_per_second, burst, max_in_flight, tokens, refilled_at,
       clock_timestamp() AS now
FROM targets
WHERE target_service = ANY(:names) OR target_service = '*'
ORDER BY target_service
FOR UPDATE;

-- name: targets_adopt
-- Targets limited only by the default get a row of their own for their bucket (limits NULL:
-- they keep following the default).
INSERT INTO targets (target_service)
SELECT name FROM unnest(CAST(:names AS text[])) AS name
ON CONFLICT (target_service) DO NOTHING;

-- name: target_slots_live
-- Live slots per target: the slot's attempt is still on its way (the run scheduled one attempt
-- behind it) or running. Anything else (ended, retried, expired, cancelled) does not count.
SELECT s.target_service, count(*) AS live
FROM target_slots s
WHERE s.target_service = ANY(:names)
  AND EXISTS (
      SELECT 1 FROM runs r
      WHERE r.run_id = s.run_id
        AND ((r.state = 'running' AND r.attempt = s.attempt)
             OR (r.state = 'scheduled' AND r.attempt = s.attempt - 1)))
GROUP BY s.target_service;

-- name: target_slots_prune
-- Slots that stopped counting (see target_slots_live) are removed.
DELETE FROM target_slots s
WHERE s.target_service = ANY(:names)
  AND NOT EXISTS (
      SELECT 1 FROM runs r
      WHERE r.run_id = s.run_id
        AND ((r.state = 'running' AND r.attempt = s.attempt)
             OR (r.state = 'scheduled' AND r.attempt = s.attempt - 1)));

-- name: targets_spend
UPDATE targets t SET tokens = u.tokens, refilled_at = u.refilled_at
FROM json_to_recordset(CAST(:rows AS json))
     AS u(target_service text, tokens double precision, refilled_at timestamptz)
WHERE t.target_service = u.target_service;

-- name: target_slots_take
INSERT INTO target_slots (target_service, run_id, attempt)
SELECT u.target_service, u.run_id, u.attempt
FROM json_to_recordset(CAST(:rows AS json)) AS u(target_service text, run_id uuid, attempt integer)
ON CONFLICT DO NOTHING;

-- name: target_waiting_report
-- What this dispatcher holds back per target right now (0 rows removed).
WITH reported AS (
    SELECT u.target_service, u.waiting
    FROM json_to_recordset(CAST(:rows AS json)) AS u(target_service text, waiting integer)
), gone AS (
    DELETE FROM target_waiting w
    WHERE w.dispatcher = :dispatcher
      AND NOT EXISTS (SELECT 1 FROM reported r WHERE r.target_service = w.target_service)
)
INSERT INTO target_waiting (target_service, dispatcher, waiting, updated_at)
SELECT target_service, :dispatcher, waiting, now() FROM reported
ON CONFLICT (target_service, dispatcher)
DO UPDATE SET waiting = EXCLUDED.waiting, updated_at = EXCLUDED.updated_at;

-- name: targets_limits
-- Every target with a row: its own limits (NULL = the default's) for the dispatchers' cache.
SELECT target_service, rate_per_second, burst, max_in_flight FROM targets;

-- name: tenants_weights
SELECT tenant, fairness_weight FROM tenants;

-- name: targets_set
INSERT INTO targets (target_service, rate_per_second, burst, max_in_flight)
VALUES (:name, :rate, :burst, :max_in_flight)
ON CONFLICT (target_service) DO UPDATE SET
    rate_per_second = COALESCE(EXCLUDED.rate_per_second, targets.rate_per_second),
    burst = COALESCE(EXCLUDED.burst, targets.burst),
    max_in_flight = COALESCE(EXCLUDED.max_in_flight, targets.max_in_flight),
    tokens = NULL, refilled_at = NULL, updated_at = now()
RETURNING target_service, rate_per_second, burst, max_in_flight;

-- name: targets_unset
DELETE FROM targets WHERE target_service = :name RETURNING target_service;

-- name: targets_overview
-- `duetime targets list`: each target with a row, its limits, live slots and runs held back
-- by dispatchers that reported in the last :fresh_seconds.
SELECT t.target_service, t.rate_per_second, t.burst, t.max_in_flight,
       (SELECT count(*) FROM target_slots s
        WHERE s.target_service = t.target_service
          AND EXISTS (
              SELECT 1 FROM runs r
              WHERE r.run_id = s.run_id
                AND ((r.state = 'running' AND r.attempt = s.attempt)
                     OR (r.state = 'scheduled' AND r.attempt = s.attempt - 1)))) AS in_flight,
       (SELECT coalesce(sum(w.waiting), 0) FROM target_waiting w
        WHERE w.target_service = t.target_service
          AND w.updated_at > now() - make_interval(secs => CAST(:fresh_seconds AS double precision)))
           AS throttled
FROM targets t
ORDER BY t.target_service = '*' DESC, t.target_service;

-- name: target_forecast_read
-- The forecast of the given targets between two epoch seconds (inclusive).
SELECT target_service, second, runs FROM target_forecast
WHERE target_service = ANY(:names) AND second BETWEEN :first AND :last;

-- name: target_forecast_add
INSERT INTO target_forecast AS f (target_service, second, runs)
SELECT u.target_service, u.second, u.runs
FROM json_to_recordset(CAST(:rows AS json)) AS u(target_service text, second bigint, runs integer)
ON CONFLICT (target_service, second) DO UPDATE SET runs = f.runs + EXCLUDED.runs;

-- name: target_forecast_prune
DELETE FROM target_forecast WHERE second < :before;
