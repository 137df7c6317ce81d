-- replay_topics: what a replay would move, per topic: the rows replay_select
-- takes (the same selectors, without its paging), how many, and when the
-- latest of them was last updated (for sent rows: when it was sent; NULL
-- without an updatedAt column), with the database's clock. Topics are
-- grouped as stored; the dialect keeps those the router pattern matches
-- exactly (@topic_like is a superset). OPTION (RECOMPILE): the optional
-- selectors are folded away for each call's parameters.
SELECT r.[order],
       COUNT_BIG(*),
       MAX(r.[updated_at]),
       SYSUTCDATETIME()
FROM [order] AS r
WHERE r.[select] = @state
  AND r.[select] IN (N'it''s dead', N'sent')
  AND (@ids IS NULL OR r.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j))
  AND (@topic_like IS NULL OR r.[order] LIKE @topic_like ESCAPE N'\')
  AND (@key IS NULL OR r.[key] = @key)
  AND (@since IS NULL OR r.[updated_at] >= CONVERT(DATETIME2, SWITCHOFFSET(@since, '+00:00')))
  AND (@until IS NULL OR r.[updated_at] < CONVERT(DATETIME2, SWITCHOFFSET(@until, '+00:00')))
  AND (@since_ago_s IS NULL OR r.[updated_at] >= DATEADD(millisecond, -@since_ago_ms, DATEADD(second, -@since_ago_s, SYSUTCDATETIME())))
  AND (@until_ago_s IS NULL OR r.[updated_at] < DATEADD(millisecond, -@until_ago_ms, DATEADD(second, -@until_ago_s, SYSUTCDATETIME())))
GROUP BY r.[order]
ORDER BY r.[order]
OPTION (RECOMPILE);
