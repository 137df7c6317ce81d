-- retry: return rows held by claim token @token to pending; @items is a JSON
-- array of {"id", "attempt", "delay_ms", "error"} objects, one per row, each
-- due at the database's SYSUTCDATETIME() + delay_ms. Fenced like complete.
-- The claim is cleared.
UPDATE o
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "attempt" }} = r.item_attempt,
    {{ col "scheduledAt" }} = DATEADD(millisecond, r.item_delay_ms, SYSUTCDATETIME()),
    {{ col "lastError" }} = r.item_error,
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "updatedAt" }} = SYSUTCDATETIME()
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
