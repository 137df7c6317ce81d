-- dead_list: dead rows, newest first: topic matching the regular expression
-- $1 (a translated router pattern; NULL: any), key $2 (NULL: any), updated at
-- or after $3 (NULL: any), at most $4 rows. The last column says whether the
-- row holds its key while later rows wait (always false without hold).
SELECT d.{{ col "id" }}::text,
       d.{{ col "topic" }},
       d.{{ col "key" }},
       d.{{ col "attempt" }},
       d.{{ col "lastError" }},
       d.{{ col "updatedAt" }},
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
  AND ($2::text IS NULL OR d.{{ col "key" }} = $2::text)
  AND ($3::timestamptz IS NULL OR d.{{ col "updatedAt" }} >= $3::timestamptz)
ORDER BY d.{{ col "updatedAt" }} DESC, d.{{ col "sequence" }} DESC
LIMIT $4
