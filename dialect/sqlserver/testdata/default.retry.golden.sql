-- retry: return rows held by claim token @token to pending; @items is a JSON
-- array of {"id", "attempt", "delay_ms", "error"} objects, one per row, each
-- due at the database's SYSUTCDATETIME() + delay_ms. Fenced like complete.
-- The claim is cleared.
UPDATE o
SET [state] = N'pending',
    [attempt] = r.item_attempt,
    [scheduled_at] = DATEADD(millisecond, r.item_delay_ms, SYSUTCDATETIME()),
    [last_error] = r.item_error,
    [updated_at] = SYSUTCDATETIME(),
    [claim_token] = NULL,
    [claimed_at] = NULL,
    [lease_expires_at] = NULL
FROM [outbox] AS o
JOIN OPENJSON(@items) WITH (
         item_id       UNIQUEIDENTIFIER '$.id',
         item_attempt  INT              '$.attempt',
         item_delay_ms INT              '$.delay_ms',
         item_error    NVARCHAR(MAX)    '$.error'
     ) AS r ON o.[id] = r.item_id
WHERE o.[claim_token] = @token
  AND o.[state] = N'processing'
  AND o.[lease_expires_at] > SYSUTCDATETIME();
