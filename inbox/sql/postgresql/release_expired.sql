-- release_expired: return up to $1 processing rows whose lease expired on
-- the database clock (a worker that died) to pending, without spending an
-- attempt. Rows locked by their owner completing them are skipped, and the
-- condition is repeated in the UPDATE.
WITH expired AS (
    SELECT e.{{ col "id" }}
    FROM {{ .Table }} AS e
    WHERE e.{{ col "state" }} = {{ state "processing" }}
      AND e.{{ col "leaseExpiresAt" }} <= now()
    ORDER BY e.{{ col "claimedAt" }}
    LIMIT $1
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE {{ .Table }} AS o
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "updatedAt" }} = now()
FROM expired
WHERE o.{{ col "id" }} = expired.{{ col "id" }}
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} <= now()
