-- replay: move one batch of rows (ids in the JSON array @ids), still stored
-- as @state (dead or sent), back to pending: attempt 0, due now, error and
-- claim cleared; the id and the sequence stay, so a replayed head of a key
-- is delivered before the key's later rows. One short statement (and
-- transaction) per batch, row locks only. No READPAST: the operator named
-- these rows, so a row locked by someone else is waited for, not skipped;
-- the state is re-checked, so a row that changed since replay_select read
-- it is left alone. Columns the table lacks are left out.
UPDATE o
SET
    [attempt] = 0,
    [scheduled_at] = SYSUTCDATETIME(),
    [last_error] = NULL,
    [claim_token] = NULL,
    [claimed_at] = NULL,
    [lease_expires_at] = NULL,
    [updated_at] = SYSUTCDATETIME(),
    [state] = N'pending'
FROM [dbo].[outbox] AS o WITH (ROWLOCK)
WHERE o.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.[state] = @state
  AND o.[state] IN (N'dead', N'sent')
  -- A keyed row whose key has a row processing is left (as on PostgreSQL:
  -- replayed now it would be its key's head while that row is out).
  AND (o.[key] IS NULL OR o.[key] = N''
       OR NOT EXISTS (
           SELECT 1
           FROM [dbo].[outbox] AS p
           WHERE p.[key] = o.[key]
             AND p.[state] = N'processing'));
