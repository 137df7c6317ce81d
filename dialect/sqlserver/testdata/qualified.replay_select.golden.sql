-- replay_select: one page of at most @n ids of rows a replay would move, in
-- (sequence, id) order so that batches follow per-key order, starting after
-- the row (@after_seq, @after_id) that ended the previous page (@after_seq
-- NULL: the first page): rows stored as @state (the dead or sent state),
-- with id in the JSON array @ids, topic LIKE @topic_like (a superset of a
-- router pattern, escape \; the dialect filters the page exactly in Go),
-- key @key, updated at or after @since and before @until, and at or after
-- @since_ago_s s + @since_ago_ms ms and before @until_ago_s s +
-- @until_ago_ms ms before SYSUTCDATETIME() on the database clock; a NULL
-- selector matches all. A plain read: it locks nothing, and the replay statement
-- re-checks the state of every id it moves. OPTION (RECOMPILE): the
-- optional selectors are folded away for each call's parameters.
SELECT TOP (@n)
       LOWER(CONVERT(NVARCHAR(36), r.[id])),
       r.[topic],
       r.[sequence]
FROM [dbo].[outbox] AS r
WHERE r.[state] = @state
  AND r.[state] IN (N'dead', N'sent')
  AND (@ids IS NULL OR r.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j))
  AND (@topic_like IS NULL OR r.[topic] LIKE @topic_like ESCAPE N'\')
  AND (@key IS NULL OR r.[key] = @key)
  AND (@since IS NULL OR r.[updated_at] >= CONVERT(DATETIME2, SWITCHOFFSET(@since, '+00:00')))
  AND (@until IS NULL OR r.[updated_at] < CONVERT(DATETIME2, SWITCHOFFSET(@until, '+00:00')))
  AND (@since_ago_s IS NULL OR r.[updated_at] >= DATEADD(millisecond, -@since_ago_ms, DATEADD(second, -@since_ago_s, SYSUTCDATETIME())))
  AND (@until_ago_s IS NULL OR r.[updated_at] < DATEADD(millisecond, -@until_ago_ms, DATEADD(second, -@until_ago_s, SYSUTCDATETIME())))
  AND (@after_seq IS NULL
       OR r.[sequence] > @after_seq
       OR (r.[sequence] = @after_seq AND r.[id] > CONVERT(UNIQUEIDENTIFIER, @after_id)))
ORDER BY r.[sequence], r.[id]
OPTION (RECOMPILE);
