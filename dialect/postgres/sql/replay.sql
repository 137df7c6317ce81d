-- replay: move one batch of rows $2, still stored as $1 (dead or sent), back
-- to pending: attempt 0, due now, error and claim cleared, the hold cleared;
-- the id and the sequence stay, so a replayed head of a key is delivered
-- before the key's later rows. One short statement per batch. Columns the
-- table lacks (lock mode has no claim columns) are left out.
UPDATE {{ .Table }}
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
WHERE {{ col "id" }} = ANY({{ ids "$2" }})
  AND {{ col "state" }} = $1::text
  AND {{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
