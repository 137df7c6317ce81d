-- dead: move rows held by claim token @token to dead; @items is a JSON array
-- of {"id", "attempt", "error"} objects, one per row. Fenced like complete.
-- The claim token and claimed_at stay as a record of the last claim; the
-- lease is cleared. A dead row no longer blocks its key.
UPDATE o
SET [select] = N'it''s dead',
    [attempt] = d.item_attempt,
    [last_error] = d.item_error,
    [updated_at] = SYSUTCDATETIME(),
    [lease_expires_at] = NULL
FROM [order] AS o
JOIN OPENJSON(@items) WITH (
         item_id      UNIQUEIDENTIFIER '$.id',
         item_attempt INT              '$.attempt',
         item_error   NVARCHAR(MAX)    '$.error'
     ) AS d ON o.[id] = d.item_id
WHERE o.[claim_token] = @token
  AND o.[select] = N'processing'
  AND o.[lease_expires_at] > SYSUTCDATETIME();
