-- complete: mark rows held by claim token @token sent; @ids is a JSON array
-- of row ids (one parameter, so no 2,100-parameter limit). Fenced on id,
-- state, token and an unexpired lease. The claim token and claimed_at stay
-- on the row as a record of which claim delivered it; the lease is cleared.
UPDATE o
SET {{ col "state" }} = {{ state "sent" }},
{{- if has "lastError" }}
    {{ col "lastError" }} = NULL,
{{- end }}
{{- if has "sentAt" }}
    {{ col "sentAt" }} = SYSUTCDATETIME(),
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = SYSUTCDATETIME(),
{{- end }}
    {{ col "leaseExpiresAt" }} = NULL
FROM {{ .Table }} AS o
WHERE o.{{ col "id" }} IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.{{ col "claimToken" }} = @token
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > SYSUTCDATETIME();
