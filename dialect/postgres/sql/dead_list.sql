-- dead_list: dead rows, newest first: topic matching the regular expression
-- $1 (a translated router pattern; NULL: any), key $2 (NULL: any), updated at
-- or after $3 (NULL: any) and at or after $5 microseconds before now() on
-- the database clock (NULL: any), at most $4 rows. The last column says
-- whether the row holds its key while later rows wait (always false without
-- hold).
SELECT d.{{ col "id" }}::text,
       d.{{ col "topic" }},
       {{ if has "key" }}d.{{ col "key" }}{{ else }}NULL::text{{ end }},
       {{ if has "attempt" }}d.{{ col "attempt" }}{{ else }}0{{ end }},
       {{ if has "lastError" }}d.{{ col "lastError" }}{{ else }}NULL::text{{ end }},
       {{ if has "updatedAt" }}d.{{ col "updatedAt" }}{{ else }}NULL::timestamptz{{ end }},
{{- if .Hold }}
       (d.{{ col "heldAt" }} IS NOT NULL AND d.{{ col "key" }} <> '' AND EXISTS (
           SELECT 1
           FROM {{ .Table }} AS w
           WHERE w.{{ col "key" }} = d.{{ col "key" }}
             AND w.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
             AND w.{{ col "sequence" }} > d.{{ col "sequence" }}))
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
