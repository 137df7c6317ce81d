-- purge: delete up to @limit rows stored as @state (sent or dead, never
-- pending or processing) last updated more than @age_s seconds plus @age_ms
-- milliseconds ago on the database clock (two INTs: DATEADD takes an INT,
-- and a retention of months does not fit in milliseconds). scheduled_at <=
-- updated_at holds for every finished row, so the redundant bound on
-- scheduled_at makes the scan a bounded range of the (state, scheduled_at)
-- index. The CTE's scan locks the rows it picks (UPDLOCK, ROWLOCK) and skips
-- rows locked by someone else (READPAST: a replay moving them right now);
-- the DELETE re-checks the state. One short statement per batch: the caller
-- (relay.RetentionPass) loops.
WITH doomed AS (
    SELECT TOP (@limit) p.[state]
    FROM [outbox] AS p WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE p.[state] = @state
      AND p.[state] IN (N'sent', N'dead')
      -- without updatedAt the age of a finished row is unknown: keep it
      AND 1 = 0
)
DELETE FROM doomed
WHERE doomed.[state] = @state;
