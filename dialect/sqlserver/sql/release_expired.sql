-- release_expired: return up to @limit processing rows whose lease has
-- expired on the database clock to pending, without spending an attempt.
-- Rows locked by a concurrent writer (their owner completing them right now)
-- are skipped (READPAST) and the condition is repeated in the UPDATE.
WITH expired AS (
    SELECT TOP (@limit)
           e.{{ col "state" }}, e.{{ col "claimToken" }}, e.{{ col "claimedAt" }},
           e.{{ col "leaseExpiresAt" }}{{ if has "updatedAt" }}, e.{{ col "updatedAt" }}{{ end }}
    FROM {{ .Table }} AS e WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE e.{{ col "state" }} = {{ state "processing" }}
      AND e.{{ col "leaseExpiresAt" }} <= SYSUTCDATETIME()
    ORDER BY e.{{ col "claimedAt" }}
)
UPDATE expired
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = SYSUTCDATETIME()
{{- end }}
WHERE expired.{{ col "state" }} = {{ state "processing" }}
  AND expired.{{ col "leaseExpiresAt" }} <= SYSUTCDATETIME();
