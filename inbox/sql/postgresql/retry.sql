-- retry: return row $1, held by claim token $2, to pending as attempt $3,
-- due in $4 microseconds, with error $5. Fenced on id, state, token and an
-- unexpired lease; the claim is cleared.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "attempt" }} = $3,
    {{ col "scheduledAt" }} = now() + $4::bigint * interval '1 microsecond',
    {{ col "lastError" }} = $5,
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = $1::uuid
  AND {{ col "claimToken" }} = $2::uuid
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
