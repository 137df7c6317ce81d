-- stats_counts: rows per logical state and the age, in milliseconds on the
-- database clock, of the oldest due pending row (0 when none). Each count is
-- a range of the (state, scheduled_at) index; the oldest age is the first
-- entry of the pending range. No locking hint: under READ_COMMITTED_SNAPSHOT
-- the counts read committed versions and wait for nobody; READPAST would
-- make them undercount.
SELECT
    (SELECT COUNT_BIG(*) FROM [order] WHERE [select] = N'pending'),
    (SELECT COUNT_BIG(*) FROM [order] WHERE [select] = N'processing'),
    (SELECT COUNT_BIG(*) FROM [order] WHERE [select] = N'sent'),
    (SELECT COUNT_BIG(*) FROM [order] WHERE [select] = N'it''s dead'),
    (SELECT COALESCE(DATEDIFF_BIG(millisecond, MIN([scheduled_at]), SYSUTCDATETIME()), 0)
     FROM [order]
     WHERE [select] = N'pending'
       AND [scheduled_at] <= SYSUTCDATETIME());
