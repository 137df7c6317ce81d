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
    [sent_at] = NULL,
    [updated_at] = SYSUTCDATETIME(),
    [select] = N'pending'
FROM [order] AS o WITH (ROWLOCK)
WHERE o.[id] IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  -- As on PostgreSQL, the plan must not depend on the table's statistics:
  -- the state conditions are written as a CASE, which no index can serve, so
  -- the only way to the rows is the id, one probe per id of the batch, never
  -- a walk of every finished row per batch; and the keys with a row
  -- processing are read once per statement through the processing rows, not
  -- probed per row through the key index, whose entries for a key grow with
  -- every row the replay has moved back to pending.
  AND (CASE WHEN o.[select] = @state
             AND o.[select] IN (N'it''s dead', N'sent') THEN 1 ELSE 0 END) = 1
  -- A keyed row whose key has a row processing is left (as on PostgreSQL:
  -- replayed now it would be its key's head while that row is out).
  AND (o.[key] IS NULL OR o.[key] = N''
       OR o.[key] NOT IN (
           SELECT p.[key]
           FROM [order] AS p
           WHERE p.[select] = N'processing'
             AND p.[key] IS NOT NULL));
