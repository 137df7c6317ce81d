-- claim: move up to $4 ready rows of source $3 to processing under claim
-- token $1 for a lease of $2 microseconds. A row is ready when it is
-- pending, due, and the head of its key within its source: no pending or
-- processing row of the same source and non-empty key comes before it.
-- The locking SELECT tests all of it (a row claimed and committed by
-- another worker meanwhile is re-evaluated against it); the UPDATE repeats
-- the state (the id is the primary key).
WITH candidates AS (
    SELECT c.{{ col "id" }}
    FROM {{ .Table }} AS c
    WHERE c.{{ col "source" }} = $3
      AND c.{{ col "state" }} = {{ state "pending" }}
      AND c.{{ col "scheduledAt" }} <= now()
      AND (c.{{ col "key" }} IS NULL OR c.{{ col "key" }} = '' OR NOT EXISTS (
          SELECT 1 FROM {{ .Table }} AS b
          WHERE b.{{ col "source" }} = c.{{ col "source" }}
            AND b.{{ col "key" }} = c.{{ col "key" }}
            AND b.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
            AND b.{{ col "sequence" }} < c.{{ col "sequence" }}))
    ORDER BY c.{{ col "sequence" }}
    LIMIT $4
    FOR UPDATE OF c SKIP LOCKED
)
UPDATE {{ .Table }} AS o
SET {{ col "state" }} = {{ state "processing" }},
    {{ col "claimToken" }} = $1::uuid,
    {{ col "claimedAt" }} = now(),
    {{ col "leaseExpiresAt" }} = clock_timestamp() + $2::bigint * interval '1 microsecond',
    {{ col "updatedAt" }} = now()
FROM candidates
WHERE o.{{ col "id" }} = candidates.{{ col "id" }}
  AND (o.{{ col "state" }} = {{ state "pending" }}) IS TRUE
RETURNING o.{{ col "id" }}::text, o.{{ col "idempotencyKey" }}, o.{{ col "topic" }}, o.{{ col "key" }},
          o.{{ col "payload" }}::text, o.{{ col "headers" }}::text, o.{{ col "attempt" }},
          o.{{ col "maxAttempts" }}, o.{{ col "sequence" }}, o.{{ col "createdAt" }}
