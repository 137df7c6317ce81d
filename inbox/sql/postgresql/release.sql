-- release: return row $1, held by claim token $2, to pending without
-- spending an attempt. Fenced like retry.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = $1::uuid
  AND {{ col "claimToken" }} = $2::uuid
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
