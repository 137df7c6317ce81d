-- retry: return rows held by claim token $1 to pending, each with its own
-- attempt count ($3), delay in microseconds from the database's now() ($4)
-- and error text ($5), for ids $2. Fenced like complete. The claim is
-- cleared.
UPDATE {{ .Table }} AS o
SET {{ col "state" }} = {{ state "pending" }},
    {{ col "attempt" }} = r.attempt,
    {{ col "scheduledAt" }} = now() + r.delay_us * interval '1 microsecond',
    {{ col "lastError" }} = r.error,
    {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "updatedAt" }} = now()
FROM unnest($2::uuid[], $3::integer[], $4::bigint[], $5::text[]) AS r(id, attempt, delay_us, error)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "claimToken" }} = $1
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > now()
