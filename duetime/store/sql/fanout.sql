-- Reads that fan out over the clusters of a shard map (duetime/store/fanout.py).

-- name: fanout_text_order
-- The given strings in this database's order of text (its collation): lists merged from several
-- clusters are put in the order one cluster's ORDER BY gives, so keyset cursors stay exact.
SELECT value FROM unnest(CAST(:values AS text[])) AS value ORDER BY value;

-- name: fanout_lateness_ms
-- Lateness of the first attempts of the runs due in the last :window_seconds: first start
-- minus due_at (the alert's measure, sql/alerts.sql runs_release_lateness), started runs only,
-- at most the :sample latest due (runs_first_start_idx, read backwards: an hour at 10,000 runs
-- a second is 36 million rows, and the dashboard asks on every view), as a histogram in whole
-- milliseconds. /v1/stats/lateness takes its percentiles from the sum of every cluster's
-- histogram (exact to the millisecond over the runs sampled).
SELECT CAST(round(late * 1000) AS bigint) AS late_ms, count(*) AS runs
FROM (
    SELECT CAST(extract(epoch FROM started_at - due_at) AS double precision) AS late
    FROM runs
    WHERE attempt = 1 AND state <> 'scheduled' AND started_at IS NOT NULL
      AND due_at > now() - make_interval(secs => CAST(:window_seconds AS double precision))
      AND due_at <= now()
      AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
    ORDER BY due_at DESC
    LIMIT :sample
) AS sample
GROUP BY 1
ORDER BY 1;
