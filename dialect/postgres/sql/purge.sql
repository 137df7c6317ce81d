-- purge: delete up to $3 rows stored as $1 (sent or dead, never pending or
-- processing) last updated more than $2 microseconds ago on the database
-- clock. On the bundled table the scan is a bounded range of
-- outbox_finished_idx (state, updated_at) over finished rows (migration
-- 00003). scheduled_at <= updated_at holds for every finished row, so the
-- redundant bound on scheduled_at makes it a bounded range of a
-- (state, scheduled_at) index too, which adopted tables (and the bundled one
-- before 00003) have instead. Rows locked by someone else (a replay) are
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
