-- stats_backlog: the @n topics with the most pending rows, with the age in
-- milliseconds of each topic's oldest due pending row (0 when none is due
-- yet). Reads every pending row once (the pending range of the (state,
-- scheduled_at) index): its cost grows with the backlog, not the table.
SELECT TOP (@n)
       s.[topic],
       COUNT_BIG(*),
       COALESCE(DATEDIFF_BIG(millisecond,
                MIN(CASE WHEN s.[scheduled_at] <= SYSUTCDATETIME() THEN s.[scheduled_at] END),
                SYSUTCDATETIME()), 0)
FROM [outbox] AS s
WHERE s.[state] = N'pending'
GROUP BY s.[topic]
ORDER BY COUNT_BIG(*) DESC, s.[topic];
