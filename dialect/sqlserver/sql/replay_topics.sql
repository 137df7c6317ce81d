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
{{- template "replayFilter" . }}
GROUP BY r.{{ col "topic" }}
ORDER BY r.{{ col "topic" }}
OPTION (RECOMPILE);
