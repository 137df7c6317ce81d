-- replay: move one batch of rows $2, still stored as $1 (dead or sent), back
-- to pending: attempt 0, due now, error and claim cleared, the hold cleared;
-- the id and the sequence stay, so a replayed head of a key is delivered
-- before the key's later rows. One short statement per batch. Columns the
-- table lacks (lock mode has no claim columns) are left out.
--
-- A keyed row whose key has a row processing is left as it is: moved back
-- now, it would be its key's head (it comes first in sequence order) while
-- that row is out, two rows of one key in flight. The caller takes the
-- claim turn first, so that a claim committed just before is seen. Lock
-- mode has no processing state: there a batch holding a later row of the
-- key is not seen.
UPDATE {{ .Table }} AS o
SET
{{- if has "attempt" }}
    {{ col "attempt" }} = 0,
{{- end }}
{{- if has "scheduledAt" }}
    {{ col "scheduledAt" }} = now(),
{{- end }}
{{- if has "lastError" }}
    {{ col "lastError" }} = NULL,
{{- end }}
{{- if has "claimToken" }}
    {{ col "claimToken" }} = NULL,
{{- end }}
{{- if has "claimedAt" }}
    {{ col "claimedAt" }} = NULL,
{{- end }}
{{- if has "leaseExpiresAt" }}
    {{ col "leaseExpiresAt" }} = NULL,
{{- end }}
{{- if .Hold }}
    {{ col "heldAt" }} = NULL,
{{- end }}
{{- if has "sentAt" }}
    {{ col "sentAt" }} = NULL,
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = now(),
{{- end }}
    {{ col "state" }} = {{ state "pending" }}
WHERE o.{{ col "id" }} = ANY({{ ids "$2" }})
  AND o.{{ col "state" }} = $1::text
  AND o.{{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
{{- if has "key" }}
  AND (o.{{ col "key" }} IS NULL OR o.{{ col "key" }} = ''
       OR NOT EXISTS (
           SELECT 1
           FROM {{ .Table }} AS p
           WHERE p.{{ col "key" }} = o.{{ col "key" }}
             AND p.{{ col "state" }} = {{ state "processing" }}))
{{- end }}
