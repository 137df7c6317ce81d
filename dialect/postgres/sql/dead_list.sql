-- dead_list: dead rows, newest first: topic matching the regular expression
-- $1 (a translated router pattern; NULL: any), key $2 (NULL: any), updated at
-- or after $3 (NULL: any) and at or after $5 microseconds before now() on
-- the database clock (NULL: any), at most $4 rows. The last column is the
-- row's own hold (relay.onDead: hold): held_at set on a keyed row, which
-- keeps the key's later rows waiting, whether or not any wait yet, until a
-- replay or `dead release` clears it (always false without hold).
SELECT d.{{ col "id" }}::text,
       d.{{ col "topic" }},
       {{ if has "key" }}d.{{ col "key" }}{{ else }}NULL::text{{ end }},
       {{ if has "attempt" }}d.{{ col "attempt" }}{{ else }}0{{ end }},
       {{ if has "lastError" }}d.{{ col "lastError" }}{{ else }}NULL::text{{ end }},
       {{ if has "updatedAt" }}d.{{ col "updatedAt" }}{{ else }}NULL::timestamptz{{ end }},
{{- if .Hold }}
       (d.{{ col "heldAt" }} IS NOT NULL AND COALESCE(d.{{ col "key" }}, '') <> '')
{{- else }}
       false
{{- end }}
FROM {{ .Table }} AS d
WHERE d.{{ col "state" }} = {{ state "dead" }}
  AND ($1::text IS NULL OR d.{{ col "topic" }} ~ $1::text)
  AND ($2::text IS NULL OR {{ if has "key" }}d.{{ col "key" }}{{ else }}NULL{{ end }} = $2::text)
  AND ($3::timestamptz IS NULL OR {{ if has "updatedAt" }}d.{{ col "updatedAt" }}{{ else }}NULL{{ end }} >= $3::timestamptz)
  AND ($5::bigint IS NULL OR {{ if has "updatedAt" }}d.{{ col "updatedAt" }}{{ else }}NULL{{ end }} >= now() - $5::bigint * interval '1 microsecond')
ORDER BY {{ if has "updatedAt" }}d.{{ col "updatedAt" }} DESC, {{ end }}d.{{ col "sequence" }} DESC
LIMIT $4
