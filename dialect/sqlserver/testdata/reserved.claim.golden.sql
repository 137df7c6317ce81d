-- claim: move up to @limit ready rows to processing under claim token @token
-- for a lease of @lease_ms milliseconds, in one UPDATE, and return them. See
-- doc.go and docs/sqlserver.md.
--
-- A row is ready when it is pending, due on the database clock, and the head
-- of its key: no pending or processing row of the same non-empty key comes
-- before it in (sequence, id) order.
--
-- Locking. The candidate scan reads the base table WITH (UPDLOCK, READPAST,
-- ROWLOCK): every row it reads is update-locked at the moment it is read, so
-- its state, due time and key are current and stay so until the statement
-- commits; a row another transaction has locked (a concurrent claimer's
-- candidate, a row being completed, a producer's uncommitted insert) is
-- skipped, never waited for. The head-of-key probe carries no hint on
-- purpose: it must SEE rows that others have locked, never skip them (a
-- skipped head would make the key's next row look like a head). Under READ
-- COMMITTED SNAPSHOT it reads the last committed version without locks;
-- under locking READ COMMITTED its shared locks are compatible with update
-- locks and wait only for rows being written. The readiness condition is
-- repeated in the UPDATE's WHERE, against the locked row.
--
-- Optional columns the table lacks (has) are left out: without key every
-- row is a head, without scheduledAt every pending row is due, and the
-- OUTPUT returns the same defaults as the PostgreSQL dialect.
--
-- The UPDATE targets the CTE, so the table is read once and only the rows
-- the scan locked are written. OUTPUT goes INTO a table variable (an OUTPUT
-- without INTO is refused on tables that have triggers).
DECLARE @claimed TABLE (
    id             NVARCHAR(36)  NOT NULL,
    topic          NVARCHAR(MAX) NOT NULL,
    message_key    NVARCHAR(MAX) NULL,
    payload        NVARCHAR(MAX) NULL,
    headers        NVARCHAR(MAX) NULL,
    aggregate_type NVARCHAR(MAX) NULL,
    attempt        INT           NOT NULL,
    max_attempts   INT           NOT NULL,
    sequence       BIGINT        NOT NULL,
    created_at     DATETIME2     NOT NULL,
    scheduled_at   DATETIME2     NOT NULL
);

WITH candidates AS (
    SELECT TOP (@limit)
           c.[id], c.[order], c.[payload], c.[select], c.[sequence], c.[key], c.[headers], c.[user], c.[attempt], c.[max_attempts], c.[created_at], c.[scheduled_at], c.[updated_at],
           c.[claimed_at], c.[claim_token], c.[lease_expires_at]
    FROM [order] AS c WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE c.[select] = N'pending'
      AND c.[scheduled_at] <= SYSUTCDATETIME()
      AND (c.[key] IS NULL OR c.[key] = N''
           OR NOT EXISTS (
               SELECT 1
               FROM [order] AS b
               WHERE b.[key] = c.[key]
                 AND b.[select] IN (N'pending', N'processing')
                 AND b.[sequence] <= c.[sequence]
                 AND (b.[sequence] < c.[sequence] OR b.[id] < c.[id])))
    ORDER BY c.[sequence], c.[id]
)
UPDATE candidates
SET [select] = N'processing',
    [claim_token] = @token,
    [claimed_at] = SYSUTCDATETIME(),
    [lease_expires_at] = DATEADD(millisecond, CONVERT(INT, @lease_ms), SYSUTCDATETIME()),
    [updated_at] = SYSUTCDATETIME()
OUTPUT LOWER(CONVERT(NVARCHAR(36), inserted.[id])),
       inserted.[order],
       inserted.[key],
       CONVERT(NVARCHAR(MAX), inserted.[payload]),
       CONVERT(NVARCHAR(MAX), inserted.[headers]),
       inserted.[user],
       inserted.[attempt],
       inserted.[max_attempts],
       inserted.[sequence],
       inserted.[created_at],
       inserted.[scheduled_at]
INTO @claimed (id, topic, message_key, payload, headers, aggregate_type, attempt, max_attempts, sequence, created_at, scheduled_at)
WHERE candidates.[select] = N'pending'
  AND candidates.[scheduled_at] <= SYSUTCDATETIME()
  AND (candidates.[key] IS NULL OR candidates.[key] = N''
       OR NOT EXISTS (
           SELECT 1
           FROM [order] AS b
           WHERE b.[key] = candidates.[key]
             AND b.[select] IN (N'pending', N'processing')
             AND b.[sequence] <= candidates.[sequence]
             AND (b.[sequence] < candidates.[sequence] OR b.[id] < candidates.[id])));

SELECT id, topic, message_key, payload, headers, aggregate_type, attempt, max_attempts, sequence, created_at, scheduled_at
FROM @claimed;
