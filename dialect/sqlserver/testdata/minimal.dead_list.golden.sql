-- dead_list: one page of at most @n dead rows, newest first
-- (sequence, descending): topic LIKE @topic_like (a
-- superset of a router pattern, escape \; NULL: any — the dialect keeps the
-- rows the pattern matches exactly in Go and fetches further pages until it
-- has enough), key @key (NULL: any), updated at or after @since (NULL: any)
-- and at or after @since_ago_s seconds plus @since_ago_ms milliseconds
-- before SYSUTCDATETIME() on the database clock (NULL: any).
-- The page starts after the row (@after_updated, @after_seq) of the previous
-- page (@after_seq NULL: the first page), so pages neither overlap nor skip
-- rows. The last column says whether the row holds its key: always 0, hold
-- is PostgreSQL-only. Times are compared as UTC DATETIME2 (SWITCHOFFSET:
-- the driver sends a time as DATETIMEOFFSET). OPTION (RECOMPILE): the
-- optional selectors are folded away for each call's parameters.
SELECT TOP (@n)
       LOWER(CONVERT(NVARCHAR(36), d.[id])),
       d.[topic],
       CAST(NULL AS NVARCHAR(255)),
       0,
       CAST(NULL AS NVARCHAR(MAX)),
       CAST(NULL AS DATETIME2),
       CAST(0 AS BIT),
       d.[sequence]
FROM [outbox] AS d
WHERE d.[state] = N'dead'
  AND (@topic_like IS NULL OR d.[topic] LIKE @topic_like ESCAPE N'\')
  AND @key IS NULL
  AND (@since IS NULL OR 1 = 1)
  AND (@since_ago_s IS NULL OR 1 = 1) AND (@since_ago_ms IS NULL OR 1 = 1)
  AND (@after_seq IS NULL OR d.[sequence] < @after_seq)
  AND (@after_updated IS NULL OR 1 = 1)
ORDER BY d.[sequence] DESC
OPTION (RECOMPILE);
