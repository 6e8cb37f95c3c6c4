-- The alert queue (table alerts), the state of condition alerts (alert_conditions), and the
-- cheap measurements the conditions compare with their thresholds. Every statement here runs in
-- a short transaction of its own or of the reaper's: no transaction waits for a webhook.
-- Batches travel as one JSON parameter (see planner.sql). Times passed as :now are the sender's
-- clock, so the rules can be tested with a fake one.

-- name: alerts_enqueue
-- Raise alerts; one that was raised before (same kind and subject) is left as it is. Returns
-- the ones this statement raised, so the caller logs each alert once.
INSERT INTO alerts (kind, subject, tenant, payload)
SELECT a.kind, a.subject, a.tenant, a.payload
FROM json_to_recordset(CAST(:rows AS json)) AS a(kind text, subject text, tenant text, payload jsonb)
ON CONFLICT (kind, subject) DO NOTHING
RETURNING kind, subject;

-- name: alerts_claim
-- Claim due alerts for one delivery attempt each: count the attempt and push next_attempt_at
-- to the claim's expiry, so no other sender takes them while this one sends; if it never
-- reports, they are due again then. SKIP LOCKED keeps concurrent senders from waiting on each
-- other. The tenant's webhook is read now, so a changed webhook applies to the next attempt.
WITH due AS (
    SELECT alert_id FROM alerts
    WHERE state = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= :now)
    ORDER BY next_attempt_at NULLS FIRST, alert_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE alerts a SET attempts = a.attempts + 1, next_attempt_at = :lease_until, updated_at = now()
FROM due
WHERE a.alert_id = due.alert_id
RETURNING a.alert_id, a.kind, a.subject, a.tenant, a.payload, a.attempts, a.created_at,
          (SELECT t.alert_webhook FROM tenants t WHERE t.tenant = a.tenant) AS tenant_webhook;

-- name: alerts_finish
-- Record delivery outcomes, fenced on the attempt: an outcome of an attempt whose claim ran out
-- and was claimed again is stale and changes nothing. state 'pending' is a retry at
-- next_attempt_at.
UPDATE alerts a SET state = o.state, next_attempt_at = o.next_attempt_at, last_error = o.error,
                    delivered_at = CASE WHEN o.state = 'delivered' THEN o.at END,
                    updated_at = now()
FROM json_to_recordset(CAST(:rows AS json)) AS o(
    alert_id bigint, attempt integer, state text, at timestamptz, next_attempt_at timestamptz,
    error text)
WHERE a.alert_id = o.alert_id AND a.attempts = o.attempt AND a.state = 'pending'
RETURNING a.alert_id;

-- name: alerts_prune
DELETE FROM alerts WHERE state <> 'pending' AND created_at < :before;

-- name: alerts_list
SELECT alert_id, kind, subject, tenant, payload, state, attempts, next_attempt_at, last_error,
       created_at, delivered_at
FROM alerts
WHERE (CAST(:state AS text) IS NULL OR state = :state)
ORDER BY alert_id DESC
LIMIT :limit;

-- name: alert_condition_create
INSERT INTO alert_conditions (kind) VALUES (:kind) ON CONFLICT (kind) DO NOTHING;

-- name: alert_condition_lock
-- Locked until the transaction ends, so two reapers checking at once take turns and only one of
-- them sees (and raises) a transition.
SELECT firing, episode, pending_since FROM alert_conditions WHERE kind = :kind FOR UPDATE;

-- name: alert_condition_save
UPDATE alert_conditions SET firing = :firing, episode = :episode, pending_since = :pending_since,
                            value = :value, checked_at = :checked_at
WHERE kind = :kind;

-- name: runs_outbox_backlog
-- Scheduled runs still unpublished although due more than :age_seconds ago (by the database
-- clock), counted up to :cap so a huge backlog costs no more than a large one. The outbox
-- index (runs_outbox_idx) holds exactly these rows, by due_at.
SELECT count(*) AS backlog, min(due_at) AS oldest_due_at
FROM (
    SELECT due_at FROM runs
    WHERE state = 'scheduled' AND published_at IS NULL
      AND due_at < now() - make_interval(secs => CAST(:age_seconds AS double precision))
    ORDER BY due_at
    LIMIT :cap
) backlog;

-- name: runs_release_lateness
-- Release lateness of the first attempts of the runs due in the last :window_seconds (by the
-- database clock): when the run first started (a worker's claim, or the dispatcher's emission
-- of a Kafka target) minus due_at; a run not started yet counts as late as it is now, so a
-- pipeline that stopped releasing shows up too. Retries are left out (their due_at is the
-- retry's). At most :limit runs, the latest due first. Started runs come from
-- runs_first_start_idx, waiting ones from the outbox and unclaimed indexes.
WITH sample AS (
    (SELECT CAST(extract(epoch FROM started_at - due_at) AS double precision) AS late_seconds
     FROM runs
     WHERE attempt = 1 AND state <> 'scheduled'
       AND due_at > now() - make_interval(secs => CAST(:window_seconds AS double precision))
       AND due_at <= now()
     ORDER BY due_at DESC
     LIMIT :limit)
    UNION ALL
    (SELECT CAST(extract(epoch FROM now() - due_at) AS double precision) AS late_seconds
     FROM (
        -- One branch per partial index (published or not): a condition on `state` alone
        -- matches neither, and the scan would read the whole day's partition.
        (SELECT due_at FROM runs
         WHERE state = 'scheduled' AND published_at IS NOT NULL AND attempt = 0
           AND due_at > now() - make_interval(secs => CAST(:window_seconds AS double precision))
           AND due_at <= now()
         ORDER BY due_at DESC
         LIMIT :limit)
        UNION ALL
        (SELECT due_at FROM runs
         WHERE state = 'scheduled' AND published_at IS NULL AND attempt = 0
           AND due_at > now() - make_interval(secs => CAST(:window_seconds AS double precision))
           AND due_at <= now()
         ORDER BY due_at DESC
         LIMIT :limit)
     ) waiting
     ORDER BY due_at DESC
     LIMIT :limit)
)
SELECT count(*) AS runs,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY late_seconds) AS p99_seconds,
       max(late_seconds) AS max_seconds
FROM sample;
