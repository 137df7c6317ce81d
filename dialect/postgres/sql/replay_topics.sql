-- replay_topics: what a replay would move, per topic: the rows replay_select
-- takes (the same selectors, $1 to $8), how many, and when the latest of
-- them was last updated (for sent rows: when it was sent; NULL without an
-- updatedAt column), with the database's now(). The CLI reads it before a
-- replay of sent rows, to tell whether they fall within a JetStream
-- stream's duplicate window.
SELECT r.{{ col "topic" }},
       count(*),
       {{ if has "updatedAt" }}max(r.{{ col "updatedAt" }}){{ else }}NULL::timestamptz{{ end }},
       now()
FROM {{ .Table }} AS r
{{- template "replayFilter" . }}
GROUP BY r.{{ col "topic" }}
ORDER BY r.{{ col "topic" }}
