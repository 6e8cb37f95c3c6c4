-- The catch-up drain (docs/flow-control.md): runs planned after their time (missed in an outage)
-- leave at this rate, across all dispatchers, before their own target's limits apply.
-- `duetime targets set @catch-up --rate R` changes it; `duetime targets unset @catch-up` turns
-- the drain off.
INSERT INTO targets (target_service, rate_per_second) VALUES ('@catch-up', 1000)
ON CONFLICT (target_service) DO NOTHING;
