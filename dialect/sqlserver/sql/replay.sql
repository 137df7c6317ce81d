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
{{- if has "attempt" }}
    {{ col "attempt" }} = 0,
{{- end }}
{{- if has "scheduledAt" }}
    {{ col "scheduledAt" }} = SYSUTCDATETIME(),
{{- end }}
{{- if has "lastError" }}
    {{ col "lastError" }} = NULL,
{{- end }}
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
{{- if has "sentAt" }}
    {{ col "sentAt" }} = NULL,
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = SYSUTCDATETIME(),
{{- end }}
    {{ col "state" }} = {{ state "pending" }}
FROM {{ .Table }} AS o WITH (ROWLOCK)
WHERE o.{{ col "id" }} IN (SELECT j.item_id FROM OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$') AS j)
  AND o.{{ col "state" }} = @state
  AND o.{{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
{{- if has "key" }}
  -- A keyed row whose key has a row processing is left (as on PostgreSQL:
  -- replayed now it would be its key's head while that row is out).
  AND (o.{{ col "key" }} IS NULL OR o.{{ col "key" }} = N''
       OR NOT EXISTS (
           SELECT 1
           FROM {{ .Table }} AS p
           WHERE p.{{ col "key" }} = o.{{ col "key" }}
             AND p.{{ col "state" }} = {{ state "processing" }}))
{{- end }};
