-- replay_select: the ids of the rows a replay would move, in (sequence, id)
-- order so that batches follow per-key order: rows stored as $1 (the dead or
-- sent state), with id in $2, topic matching the regular expression $3, key
-- $4, updated at or after $5 and before $6, and at or after $7 and before $8
-- microseconds before now() on the database clock; a NULL selector matches
-- all.
SELECT r.{{ col "id" }}::text
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
ORDER BY r.{{ col "sequence" }}, r.{{ col "id" }}
