-- replay_topics: what a replay would move, per topic: the rows replay_select
-- takes (the same selectors, without its paging), how many, and when the
-- latest of them was last updated (for sent rows: when it was sent; NULL
-- without an updatedAt column), with the database's clock. Topics are
-- grouped as stored; the dialect keeps those the router pattern matches
-- exactly (@topic_like is a superset). OPTION (RECOMPILE): the optional
-- selectors are folded away for each call's parameters.
SELECT r.[topic],
       COUNT_BIG(*),
       CAST(NULL AS DATETIME2),
       SYSUTCDATETIME()
FROM [outbox] AS r
WHERE r.[state] = @state
  AND r.[state] IN (N'dead', N'sent')
  AND (@ids IS NULL OR r.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j))
  AND (@topic_like IS NULL OR r.[topic] LIKE @topic_like ESCAPE N'\')
  AND @key IS NULL
  AND @since IS NULL AND @until IS NULL
  AND @since_ago_s IS NULL AND @since_ago_ms IS NULL AND @until_ago_s IS NULL AND @until_ago_ms IS NULL
GROUP BY r.[topic]
ORDER BY r.[topic]
OPTION (RECOMPILE);
