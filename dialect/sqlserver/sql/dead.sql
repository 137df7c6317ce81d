-- dead: move rows held by claim token @token to dead; @items is a JSON array
-- of {"id", "attempt", "error"} objects, one per row. Fenced like complete.
-- The claim token and claimed_at stay as a record of the last claim; the
-- lease is cleared. A dead row no longer blocks its key.
UPDATE o
SET {{ col "state" }} = {{ state "dead" }},
{{- if has "attempt" }}
    {{ col "attempt" }} = d.item_attempt,
{{- end }}
{{- if has "lastError" }}
    {{ col "lastError" }} = d.item_error,
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = SYSUTCDATETIME(),
{{- end }}
    {{ col "leaseExpiresAt" }} = NULL
FROM {{ .Table }} AS o
JOIN OPENJSON(@items) WITH (
         item_id      UNIQUEIDENTIFIER '$.id',
         item_attempt INT              '$.attempt',
         item_error   NVARCHAR(MAX)    '$.error'
     ) AS d ON o.{{ col "id" }} = d.item_id
WHERE o.{{ col "claimToken" }} = @token
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > SYSUTCDATETIME();
