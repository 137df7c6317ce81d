-- dead_list: one page of at most @n dead rows, newest first
-- ({{ if has "updatedAt" }}updated_at, then {{ end }}sequence, descending): topic LIKE @topic_like (a
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
       LOWER(CONVERT(NVARCHAR(36), d.{{ col "id" }})),
       d.{{ col "topic" }},
       {{ if has "key" }}d.{{ col "key" }}{{ else }}CAST(NULL AS NVARCHAR(255)){{ end }},
       {{ if has "attempt" }}d.{{ col "attempt" }}{{ else }}0{{ end }},
       {{ if has "lastError" }}CONVERT(NVARCHAR(MAX), d.{{ col "lastError" }}){{ else }}CAST(NULL AS NVARCHAR(MAX)){{ end }},
       {{ if has "updatedAt" }}d.{{ col "updatedAt" }}{{ else }}CAST(NULL AS DATETIME2){{ end }},
       CAST(0 AS BIT),
       d.{{ col "sequence" }}
FROM {{ .Table }} AS d
WHERE d.{{ col "state" }} = {{ state "dead" }}
  AND (@topic_like IS NULL OR d.{{ col "topic" }} LIKE @topic_like ESCAPE N'\')
{{- if has "key" }}
  AND (@key IS NULL OR d.{{ col "key" }} = @key)
{{- else }}
  AND @key IS NULL
{{- end }}
{{- if has "updatedAt" }}
  AND (@since IS NULL OR d.{{ col "updatedAt" }} >= CONVERT(DATETIME2, SWITCHOFFSET(@since, '+00:00')))
  AND (@since_ago_s IS NULL OR d.{{ col "updatedAt" }} >= DATEADD(millisecond, -@since_ago_ms, DATEADD(second, -@since_ago_s, SYSUTCDATETIME())))
  AND (@after_seq IS NULL
       OR d.{{ col "updatedAt" }} < CONVERT(DATETIME2, SWITCHOFFSET(@after_updated, '+00:00'))
       OR (d.{{ col "updatedAt" }} = CONVERT(DATETIME2, SWITCHOFFSET(@after_updated, '+00:00')) AND d.{{ col "sequence" }} < @after_seq)
       -- rows without updated_at sort last (DESC): after a dated row come
       -- all undated ones, after an undated row the undated ones below it
       OR (@after_updated IS NOT NULL AND d.{{ col "updatedAt" }} IS NULL)
       OR (@after_updated IS NULL AND d.{{ col "updatedAt" }} IS NULL AND d.{{ col "sequence" }} < @after_seq))
ORDER BY d.{{ col "updatedAt" }} DESC, d.{{ col "sequence" }} DESC
{{- else }}
  AND (@since IS NULL OR 1 = 1)
  AND (@since_ago_s IS NULL OR 1 = 1) AND (@since_ago_ms IS NULL OR 1 = 1)
  AND (@after_seq IS NULL OR d.{{ col "sequence" }} < @after_seq)
  AND (@after_updated IS NULL OR 1 = 1)
ORDER BY d.{{ col "sequence" }} DESC
{{- end }}
OPTION (RECOMPILE);
