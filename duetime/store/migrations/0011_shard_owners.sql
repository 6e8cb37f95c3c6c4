-- Shard ownership fence (docs/failover.md). With etcd configured a planner owns a shard under its
-- etcd lease, and its fencing token is the shard key's create revision, which every new owner
-- gets larger. This table keeps the highest token each shard was claimed with. A planner's
-- planning transaction first locks its shards' rows FOR SHARE where the token is still its own
-- (shards_fence); the due scan, the run inserts and the job advances of that transaction carry
-- the same tokens and drop every row of a shard whose stored token differs. So a planner that
-- lost a shard (paused past its lease, cut off from etcd) cannot write for it once the next owner
-- has claimed it: the database refuses the lower token, whatever the planner believes.
-- rejected counts planning transactions refused that way (the last one's owner and time kept).
CREATE TABLE shard_owners (
    shard_id            smallint PRIMARY KEY CHECK (shard_id BETWEEN 0 AND 127),
    token               bigint NOT NULL CHECK (token > 0),
    owner               text NOT NULL,
    claimed_at          timestamptz NOT NULL DEFAULT now(),
    rejected            bigint NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    last_rejected_at    timestamptz,
    last_rejected_owner text
);
