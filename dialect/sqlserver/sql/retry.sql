-- retry: return rows held by claim token @token to pending; @items is a JSON
-- array of {"id", "attempt", "delay_ms", "error"} objects, one per row, each
-- due at the database's SYSUTCDATETIME() + delay_ms. Fenced like complete.
-- The claim is cleared.
UPDATE o
SET {{ col "state" }} = {{ state "pending" }},
{{- if has "attempt" }}
    {{ col "attempt" }} = r.item_attempt,
{{- end }}
{{- if has "scheduledAt" }}
    {{ col "scheduledAt" }} = DATEADD(millisecond, r.item_delay_ms, SYSUTCDATETIME()),
{{- end }}
{{- if has "lastError" }}
    {{ col "lastError" }} = r.item_error,
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = SYSUTCDATETIME(),
{{- end }}
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL
FROM {{ .Table }} AS o
JOIN OPENJSON(@items) WITH (
         item_id       UNIQUEIDENTIFIER '$.id',
         item_attempt  INT              '$.attempt',
         item_delay_ms INT              '$.delay_ms',
         item_error    NVARCHAR(MAX)    '$.error'
     ) AS r ON o.{{ col "id" }} = r.item_id
WHERE o.{{ col "claimToken" }} = @token
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > SYSUTCDATETIME();
