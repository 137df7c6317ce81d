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
       LOWER(CONVERT(NVARCHAR(36), r.{{ col "id" }})),
       r.{{ col "topic" }},
       r.{{ col "sequence" }}
FROM {{ .Table }} AS r
WHERE r.{{ col "state" }} = @state
  AND r.{{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
  AND (@ids IS NULL OR r.{{ col "id" }} IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j))
  AND (@topic_like IS NULL OR r.{{ col "topic" }} LIKE @topic_like ESCAPE N'\')
{{- if has "key" }}
  AND (@key IS NULL OR r.{{ col "key" }} = @key)
{{- else }}
  AND @key IS NULL
{{- end }}
{{- if has "updatedAt" }}
  AND (@since IS NULL OR r.{{ col "updatedAt" }} >= CONVERT(DATETIME2, SWITCHOFFSET(@since, '+00:00')))
  AND (@until IS NULL OR r.{{ col "updatedAt" }} < CONVERT(DATETIME2, SWITCHOFFSET(@until, '+00:00')))
  AND (@since_ago_s IS NULL OR r.{{ col "updatedAt" }} >= DATEADD(millisecond, -@since_ago_ms, DATEADD(second, -@since_ago_s, SYSUTCDATETIME())))
  AND (@until_ago_s IS NULL OR r.{{ col "updatedAt" }} < DATEADD(millisecond, -@until_ago_ms, DATEADD(second, -@until_ago_s, SYSUTCDATETIME())))
{{- else }}
  AND @since IS NULL AND @until IS NULL
  AND @since_ago_s IS NULL AND @since_ago_ms IS NULL AND @until_ago_s IS NULL AND @until_ago_ms IS NULL
{{- end }}
  AND (@after_seq IS NULL
       OR r.{{ col "sequence" }} > @after_seq
       OR (r.{{ col "sequence" }} = @after_seq AND r.{{ col "id" }} > CONVERT(UNIQUEIDENTIFIER, @after_id)))
ORDER BY r.{{ col "sequence" }}, r.{{ col "id" }}
OPTION (RECOMPILE);
