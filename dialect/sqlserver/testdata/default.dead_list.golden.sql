-- dead_list: one page of at most @n dead rows, newest first
-- (updated_at, then sequence, descending): topic LIKE @topic_like (a
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
       d.[key],
       d.[attempt],
       CONVERT(NVARCHAR(MAX), d.[last_error]),
       d.[updated_at],
       CAST(0 AS BIT),
       d.[sequence]
FROM [outbox] AS d
WHERE d.[state] = N'dead'
  AND (@topic_like IS NULL OR d.[topic] LIKE @topic_like ESCAPE N'\')
  AND (@key IS NULL OR d.[key] = @key)
  AND (@since IS NULL OR d.[updated_at] >= CONVERT(DATETIME2, SWITCHOFFSET(@since, '+00:00')))
  AND (@since_ago_s IS NULL OR d.[updated_at] >= DATEADD(millisecond, -@since_ago_ms, DATEADD(second, -@since_ago_s, SYSUTCDATETIME())))
  AND (@after_seq IS NULL
       OR d.[updated_at] < CONVERT(DATETIME2, SWITCHOFFSET(@after_updated, '+00:00'))
       OR (d.[updated_at] = CONVERT(DATETIME2, SWITCHOFFSET(@after_updated, '+00:00')) AND d.[sequence] < @after_seq)
       -- rows without updated_at sort last (DESC): after a dated row come
       -- all undated ones, after an undated row the undated ones below it
       OR (@after_updated IS NOT NULL AND d.[updated_at] IS NULL)
       OR (@after_updated IS NULL AND d.[updated_at] IS NULL AND d.[sequence] < @after_seq))
ORDER BY d.[updated_at] DESC, d.[sequence] DESC
OPTION (RECOMPILE);
