-- release_expired: return up to @limit processing rows whose lease has
-- expired on the database clock to pending, without spending an attempt.
-- Rows locked by a concurrent writer (their owner completing them right now)
-- are skipped (READPAST) and the condition is repeated in the UPDATE.
WITH expired AS (
    SELECT TOP (@limit)
           e.[state], e.[claim_token], e.[claimed_at],
           e.[lease_expires_at]
    FROM [outbox] AS e WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE e.[state] = N'processing'
      AND e.[lease_expires_at] <= SYSUTCDATETIME()
    ORDER BY e.[claimed_at]
)
UPDATE expired
SET [state] = N'pending',
    [claim_token] = NULL,
    [claimed_at] = NULL,
    [lease_expires_at] = NULL
WHERE expired.[state] = N'processing'
  AND expired.[lease_expires_at] <= SYSUTCDATETIME();
