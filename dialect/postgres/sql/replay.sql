-- replay: move one batch of rows $2, still stored as $1 (dead or sent), back
-- to pending: attempt 0, due now, error and claim cleared, the hold cleared;
-- the id and the sequence stay, so a replayed head of a key is delivered
-- before the key's later rows. One short statement per batch.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "attempt" }} = 0,
    {{ col "scheduledAt" }} = now(),
    {{ col "lastError" }} = NULL,
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
{{- if .Hold }}
    {{ col "heldAt" }} = NULL,
{{- end }}
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = ANY($2::uuid[])
  AND {{ col "state" }} = $1::text
  AND {{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})
