-- dead_release: let the later rows of key @key flow while its dead rows stay
-- dead. Hold (relay.onDead: hold) is PostgreSQL-only for now: the SQL Server
-- table has no held_at column and this dialect never holds a key, so there
-- is nothing to release. The statement is defined so that both dialects
-- have the same query set; it changes nothing, and the dialect does not
-- implement dialect.KeyReleaser, so `queuebox dead release` says so.
SELECT CAST(0 AS BIGINT) WHERE 1 = 0 AND @key IS NULL;
