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
WHERE r.{{ col "state" }} = $1::text
  AND r.{{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
  AND ($2::text[] IS NULL OR r.{{ col "id" }} = ANY({{ ids "$2" }}))
  AND ($3::text IS NULL OR r.{{ col "topic" }} ~ $3::text)
{{- if has "key" }}
  AND ($4::text IS NULL OR r.{{ col "key" }} = $4::text)
{{- else }}
  AND $4::text IS NULL
{{- end }}
{{- if has "updatedAt" }}
  AND ($5::timestamptz IS NULL OR r.{{ col "updatedAt" }} >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR r.{{ col "updatedAt" }} < $6::timestamptz)
  AND ($7::bigint IS NULL OR r.{{ col "updatedAt" }} >= now() - $7::bigint * interval '1 microsecond')
  AND ($8::bigint IS NULL OR r.{{ col "updatedAt" }} < now() - $8::bigint * interval '1 microsecond')
{{- else }}
  AND $5::timestamptz IS NULL AND $6::timestamptz IS NULL AND $7::bigint IS NULL AND $8::bigint IS NULL
{{- end }}
GROUP BY r.{{ col "topic" }}
ORDER BY r.{{ col "topic" }}
