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
--
-- The plan must not depend on the table's statistics (a replay is what an
-- operator runs after an incident, on a table that autovacuum may not have
-- analyzed since it filled). As in the claim, the state conditions are
-- written (...) IS TRUE, which is no index condition: the only way to the
-- rows is the id, a primary-key probe per id of the batch, never a walk of
-- every finished row per batch. The keys with a row processing are read
-- once per statement (an InitPlan over the processing rows), not probed per
-- row through the key index, whose entries for a key grow with every row
-- the replay has already moved back to pending.
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
  AND (o.{{ col "state" }} = $1::text) IS TRUE
  AND (o.{{ col "state" }} IN ({{ state "dead" }}, {{ state "sent" }})) IS TRUE
{{- if has "key" }}
  AND (o.{{ col "key" }} IS NULL OR o.{{ col "key" }} = ''
       OR o.{{ col "key" }} <> ALL (ARRAY(
           SELECT p.{{ col "key" }}
           FROM {{ .Table }} AS p
           WHERE p.{{ col "state" }} = {{ state "processing" }}
             AND p.{{ col "key" }} IS NOT NULL)))
{{- end }}
