-- purge: delete up to @limit rows stored as @state (sent or dead, never
-- pending or processing) last updated more than @age_s seconds plus @age_ms
-- milliseconds ago on the database clock (two INTs: DATEADD takes an INT,
-- and a retention of months does not fit in milliseconds). scheduled_at <=
-- updated_at holds for every finished row, so the redundant bound on
-- scheduled_at makes the scan a bounded range of the (state, scheduled_at)
-- index. The CTE's scan locks the rows it picks (UPDLOCK, ROWLOCK) and skips
-- rows locked by someone else (READPAST: a replay moving them right now);
-- the DELETE re-checks the state. One short statement per batch: the caller
-- (relay.RetentionPass) loops.
WITH doomed AS (
    SELECT TOP (@limit) p.{{ col "state" }}
    FROM {{ .Table }} AS p WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE p.{{ col "state" }} = @state
      AND p.{{ col "state" }} IN ({{ state "sent" }}, {{ state "dead" }})
{{- if has "scheduledAt" }}
      AND p.{{ col "scheduledAt" }} < DATEADD(millisecond, -@age_ms, DATEADD(second, -@age_s, SYSUTCDATETIME()))
{{- end }}
{{- if has "updatedAt" }}
      AND p.{{ col "updatedAt" }} < DATEADD(millisecond, -@age_ms, DATEADD(second, -@age_s, SYSUTCDATETIME()))
{{- else if has "sentAt" }}
      AND p.{{ col "sentAt" }} < DATEADD(millisecond, -@age_ms, DATEADD(second, -@age_s, SYSUTCDATETIME()))
{{- else }}
      -- without updatedAt the age of a finished row is unknown: keep it
      AND 1 = 0
{{- end }}
)
DELETE FROM doomed
WHERE doomed.{{ col "state" }} = @state;
