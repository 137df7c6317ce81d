-- complete: mark row $1, held by claim token $2, processed, inside the
-- handler's transaction. Fenced on id, state, token and a lease unexpired
-- now (clock_timestamp(): the transaction may have started long ago). No
-- row: the claim was lost, and the handler's transaction must roll back.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "sent" }},
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "lastError" }} = NULL,
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = $1::uuid
  AND {{ col "claimToken" }} = $2::uuid
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > clock_timestamp()
