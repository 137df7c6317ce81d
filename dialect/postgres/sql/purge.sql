-- purge: delete up to $3 rows stored as $1 (sent or dead, never pending or
-- processing) last updated more than $2 microseconds ago on the database
-- clock. scheduled_at <= updated_at holds for every finished row, so the
-- redundant bound on scheduled_at turns the scan into a bounded range of the
-- (state, scheduled_at) index. Rows locked by someone else (a replay) are
-- skipped; with hold, a dead row that holds its key is kept.
WITH doomed AS (
    SELECT p.{{ col "id" }}
    FROM {{ .Table }} AS p
    WHERE p.{{ col "state" }} = $1::text
      AND p.{{ col "state" }} IN ({{ state "sent" }}, {{ state "dead" }})
{{- if has "scheduledAt" }}
      AND p.{{ col "scheduledAt" }} < now() - $2::bigint * interval '1 microsecond'
{{- end }}
{{- if has "updatedAt" }}
      AND p.{{ col "updatedAt" }} < now() - $2::bigint * interval '1 microsecond'
{{- else if has "sentAt" }}
      AND p.{{ col "sentAt" }} < now() - $2::bigint * interval '1 microsecond'
{{- else }}
      -- without updatedAt the age of a finished row is unknown: keep it
      AND false
{{- end }}
{{- if .Hold }}
      AND (p.{{ col "state" }} <> {{ state "dead" }} OR p.{{ col "heldAt" }} IS NULL)
{{- end }}
    LIMIT $3
    FOR UPDATE OF p SKIP LOCKED
)
DELETE FROM {{ .Table }} AS o
USING doomed
WHERE o.{{ col "id" }} = doomed.{{ col "id" }}
  AND o.{{ col "state" }} = $1::text
