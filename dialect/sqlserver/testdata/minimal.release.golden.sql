-- release: return rows held by claim token @token (ids in the JSON array
-- @ids) to pending without spending an attempt (shutdown, destination down).
-- Unlike the other fenced writes this one does not require an unexpired
-- lease: while the row is still processing under our token nobody else holds
-- it, and handing it back early is what the expired-lease reaper would do.
UPDATE o
SET [state] = N'pending',
    [claim_token] = NULL,
    [claimed_at] = NULL,
    [lease_expires_at] = NULL
FROM [outbox] AS o
WHERE o.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.[claim_token] = @token
  AND o.[state] = N'processing';
