-- release: return rows held by claim token @token (ids in the JSON array
-- @ids) to pending without spending an attempt (shutdown, destination down).
-- Unlike the other fenced writes this one does not require an unexpired
-- lease: while the row is still processing under our token nobody else holds
-- it, and handing it back early is what the expired-lease reaper would do.
UPDATE o
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = SYSUTCDATETIME()
{{- end }}
FROM {{ .Table }} AS o
WHERE o.{{ col "id" }} IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.{{ col "claimToken" }} = @token
  AND o.{{ col "state" }} = {{ state "processing" }};
