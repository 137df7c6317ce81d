-- renew: extend by $2 microseconds the lease of every row still held by
-- claim token $1 (the outbox dialect's renew, on the inbox table).
UPDATE {{ .Table }}
SET {{ col "leaseExpiresAt" }} = now() + $2::bigint * interval '1 microsecond',
    {{ col "updatedAt" }} = now()
WHERE {{ col "claimToken" }} = $1::uuid
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
