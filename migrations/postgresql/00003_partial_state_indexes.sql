-- Fewer index writes per delivered row.
--
-- Every state change of a row is a non-HOT update: PostgreSQL writes an
-- entry for the new row version in every index whose key or predicate
-- covers it. With the full (state, scheduled_at) and (topic) indexes of
-- 00001, a delivery wrote 8 index entries (5 at the claim, 3 at the
-- completion). Split by state, the same queries are served and a delivery
-- writes 5 (3 at the claim: primary key, head-of-key, processing; 2 at the
-- completion: primary key, finished), a row without a key 4 (its claim
-- skips the head-of-key index, below): the database's CPU per delivered row
-- fell by a sixth in the benchmark, and the claim, which is the relay's
-- critical path, got cheaper.
--
--   outbox_pending_scheduled_idx  (state, scheduled_at) WHERE state =
--                                 'pending': the contract's "pending rows by
--                                 (state, scheduled_at)" (oldest pending age,
--                                 pending count, due rows).
--   outbox_pending_topic_idx      (topic) WHERE state = 'pending': backlog
--                                 per topic (`queuebox stats`).
--   outbox_finished_idx           (state, updated_at) WHERE state IN ('sent',
--                                 'dead'): the operator queries on finished
--                                 rows (dead list, newest first; replay by
--                                 time range; retention by age; counts).
--
--   outbox_key_sequence_idx       (key, sequence) WHERE state IN ('pending',
--                                 'processing') AND key IS NOT NULL: the
--                                 head-of-key probe as before, without the
--                                 rows that have no key, which the probe
--                                 never looks up (b.key = c.key is never true
--                                 for NULL, and the planner proves the
--                                 predicate from it). Unkeyed rows cost one
--                                 index write less at insert and at claim.
--                                 Built as outbox_key_head_idx, then renamed
--                                 in place of the old one.
--
-- They replace outbox_state_scheduled_idx (state, scheduled_at) and
-- outbox_topic_idx (topic). Replay by topic matches a regular expression,
-- which no B-tree index serves, so nothing needs topic on finished rows.
--
-- outbox_pending_scheduled_idx shares its predicate with outbox_claim_idx.
-- The planner's choice for the claim is the same as before: the full
-- (state, scheduled_at) index offered it the same alternative (an index
-- condition on scheduled_at, then a sort), and the claim-plan test pins that
-- the claim walks outbox_claim_idx in its ORDER BY.
--
-- The indexes are built and dropped CONCURRENTLY so that the migration does
-- not block the application's inserts on a busy table, which needs a
-- migration outside a transaction. The new indexes exist before the old ones
-- go; an interrupted run leaves both (IF NOT EXISTS / IF EXISTS make a rerun
-- safe, at worst rebuilding the key index once more; an interrupted CREATE
-- INDEX CONCURRENTLY can leave an INVALID index: drop it and run the
-- migration again).

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_pending_scheduled_idx ON outbox (state, scheduled_at)
    WHERE state = 'pending';

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_pending_topic_idx ON outbox (topic)
    WHERE state = 'pending';

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_finished_idx ON outbox (state, updated_at)
    WHERE state IN ('sent', 'dead');

DROP INDEX CONCURRENTLY IF EXISTS outbox_state_scheduled_idx;

DROP INDEX CONCURRENTLY IF EXISTS outbox_topic_idx;

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_key_head_idx ON outbox (key, sequence)
    WHERE state IN ('pending', 'processing') AND key IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS outbox_key_sequence_idx;

ALTER INDEX outbox_key_head_idx RENAME TO outbox_key_sequence_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_key_all_idx ON outbox (key, sequence)
    WHERE state IN ('pending', 'processing');

DROP INDEX CONCURRENTLY IF EXISTS outbox_key_sequence_idx;

ALTER INDEX outbox_key_all_idx RENAME TO outbox_key_sequence_idx;

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_state_scheduled_idx ON outbox (state, scheduled_at);

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_topic_idx ON outbox (topic);

DROP INDEX CONCURRENTLY IF EXISTS outbox_finished_idx;

DROP INDEX CONCURRENTLY IF EXISTS outbox_pending_topic_idx;

DROP INDEX CONCURRENTLY IF EXISTS outbox_pending_scheduled_idx;
