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
           c.{{ col "id" }}, c.{{ col "topic" }}, c.{{ col "payload" }}, c.{{ col "state" }}, c.{{ col "sequence" }},
{{- range $c := optional }}{{ if has $c }} c.{{ col $c }},{{ end }}{{ end }}
           c.{{ col "claimedAt" }}, c.{{ col "claimToken" }}, c.{{ col "leaseExpiresAt" }}
    FROM {{ .Table }} AS c WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE c.{{ col "state" }} = {{ state "pending" }}
{{- if has "scheduledAt" }}
      AND c.{{ col "scheduledAt" }} <= SYSUTCDATETIME()
{{- end }}
{{- if has "key" }}
      AND (c.{{ col "key" }} IS NULL OR c.{{ col "key" }} = N''
           OR NOT EXISTS (
               SELECT 1
               FROM {{ .Table }} AS b
               WHERE b.{{ col "key" }} = c.{{ col "key" }}
                 AND b.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
                 AND b.{{ col "sequence" }} <= c.{{ col "sequence" }}
                 AND (b.{{ col "sequence" }} < c.{{ col "sequence" }} OR b.{{ col "id" }} < c.{{ col "id" }})))
{{- end }}
    ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
)
UPDATE candidates
SET {{ col "state" }} = {{ state "processing" }},
    {{ col "claimToken" }} = @token,
    {{ col "claimedAt" }} = SYSUTCDATETIME(),
    {{ col "leaseExpiresAt" }} = DATEADD(millisecond, CONVERT(INT, @lease_ms), SYSUTCDATETIME())
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = SYSUTCDATETIME()
{{- end }}
OUTPUT LOWER(CONVERT(NVARCHAR(36), inserted.{{ col "id" }})),
       inserted.{{ col "topic" }},
       {{ if has "key" }}inserted.{{ col "key" }}{{ else }}NULL{{ end }},
       CONVERT(NVARCHAR(MAX), inserted.{{ col "payload" }}),
       {{ if has "headers" }}CONVERT(NVARCHAR(MAX), inserted.{{ col "headers" }}){{ else }}NULL{{ end }},
       {{ if has "aggregateType" }}inserted.{{ col "aggregateType" }}{{ else }}NULL{{ end }},
       {{ if has "attempt" }}inserted.{{ col "attempt" }}{{ else }}0{{ end }},
       {{ if not (has "attempt") }}1{{ else if has "maxAttempts" }}inserted.{{ col "maxAttempts" }}{{ else }}0{{ end }},
       inserted.{{ col "sequence" }},
       {{ if has "createdAt" }}inserted.{{ col "createdAt" }}{{ else }}SYSUTCDATETIME(){{ end }},
       {{ if has "scheduledAt" }}inserted.{{ col "scheduledAt" }}{{ else }}SYSUTCDATETIME(){{ end }}
INTO @claimed (id, topic, message_key, payload, headers, aggregate_type, attempt, max_attempts, sequence, created_at, scheduled_at)
WHERE candidates.{{ col "state" }} = {{ state "pending" }}
{{- if has "scheduledAt" }}
  AND candidates.{{ col "scheduledAt" }} <= SYSUTCDATETIME()
{{- end }}
{{- if has "key" }}
  AND (candidates.{{ col "key" }} IS NULL OR candidates.{{ col "key" }} = N''
       OR NOT EXISTS (
           SELECT 1
           FROM {{ .Table }} AS b
           WHERE b.{{ col "key" }} = candidates.{{ col "key" }}
             AND b.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
             AND b.{{ col "sequence" }} <= candidates.{{ col "sequence" }}
             AND (b.{{ col "sequence" }} < candidates.{{ col "sequence" }} OR b.{{ col "id" }} < candidates.{{ col "id" }})))
{{- end }};

SELECT id, topic, message_key, payload, headers, aggregate_type, attempt, max_attempts, sequence, created_at, scheduled_at
FROM @claimed;
