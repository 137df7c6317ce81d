-- dead: move row $1, held by claim token $2, to dead as attempt $3 with
-- reason $4. Fenced like retry. A dead row releases its key.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "dead" }},
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "attempt" }} = $3,
    {{ col "lastError" }} = $4,
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = $1::uuid
  AND {{ col "claimToken" }} = $2::uuid
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
