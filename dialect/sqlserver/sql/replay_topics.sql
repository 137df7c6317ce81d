-- replay_topics: what a replay would move, per topic: the rows replay_select
-- takes (the same selectors, without its paging), how many, and when the
-- latest of them was last updated (for sent rows: when it was sent; NULL
-- without an updatedAt column), with the database's clock. Topics are
-- grouped as stored; the dialect keeps those the router pattern matches
-- exactly (@topic_like is a superset). OPTION (RECOMPILE): the optional
-- selectors are folded away for each call's parameters.
SELECT r.{{ col "topic" }},
       COUNT_BIG(*),
       {{ if has "updatedAt" }}MAX(r.{{ col "updatedAt" }}){{ else }}CAST(NULL AS DATETIME2){{ end }},
       SYSUTCDATETIME()
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
GROUP BY r.{{ col "topic" }}
ORDER BY r.{{ col "topic" }}
OPTION (RECOMPILE);
