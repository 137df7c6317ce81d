-- Held keys (relay.onDead: hold). held_at marks a dead row that holds its
-- key: it is set when a keyed row dies while the relay holds keys, and
-- cleared by `queuebox dead release --key K` (the key's later rows flow, the
-- row stays dead) and by replay. The claim rendered for hold mode keeps a
-- key's later rows waiting behind such a row. With relay.onDead: release no
-- query reads or writes the column, and rows that died before a switch to
-- hold hold nothing.
--
--   outbox_held_key_idx  (key, sequence) WHERE state = 'dead' AND held_at IS
--                        NOT NULL: the claim's hold probe. Only held rows are
--                        in it, so it stays tiny, and its predicate differs
--                        from every other partial index's.
--
-- Adding a nullable column without a default is a catalog change (no table
-- rewrite); the index is built CONCURRENTLY so that a migration on a busy
-- table does not block writers, which needs a migration outside a
-- transaction.

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS held_at TIMESTAMPTZ;

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_held_key_idx ON outbox (key, sequence)
    WHERE state = 'dead' AND held_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_held_key_idx;
ALTER TABLE outbox DROP COLUMN IF EXISTS held_at;
