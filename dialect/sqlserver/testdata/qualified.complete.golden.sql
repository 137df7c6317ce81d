-- complete: mark rows held by claim token @token sent; @ids is a JSON array
-- of row ids (one parameter, so no 2,100-parameter limit). Fenced on id,
-- state, token and an unexpired lease. The claim token and claimed_at stay
-- on the row as a record of which claim delivered it; the lease is cleared.
UPDATE o
SET [state] = N'sent',
    [last_error] = NULL,
    [updated_at] = SYSUTCDATETIME(),
    [lease_expires_at] = NULL
FROM [dbo].[outbox] AS o
WHERE o.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.[claim_token] = @token
  AND o.[state] = N'processing'
  AND o.[lease_expires_at] > SYSUTCDATETIME();
