-- stats_counts: rows per logical state and the age, in milliseconds on the
-- database clock, of the oldest due pending row (0 when none). Each count is
-- a range of the (state, scheduled_at) index; the oldest age is the first
-- entry of the pending range. No locking hint: under READ_COMMITTED_SNAPSHOT
-- the counts read committed versions and wait for nobody; READPAST would
-- make them undercount.
SELECT
    (SELECT COUNT_BIG(*) FROM [outbox] WHERE [state] = N'pending'),
    (SELECT COUNT_BIG(*) FROM [outbox] WHERE [state] = N'processing'),
    (SELECT COUNT_BIG(*) FROM [outbox] WHERE [state] = N'sent'),
    (SELECT COUNT_BIG(*) FROM [outbox] WHERE [state] = N'dead'),
    -- neither scheduledAt nor createdAt: the age of a pending row is unknown
    CAST(0 AS BIGINT);
