-- retry: return rows held by claim token $1 to pending, each with its own
-- attempt count ($3), delay in microseconds from the database's now() ($4)
-- and error text ($5), for ids $2. Fenced like complete. The claim is
-- cleared. Without a scheduledAt column the row is due again at once.
UPDATE {{ .Table }} AS o
SET {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
{{- template "retrySet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::bigint[], $5::text[]) AS r(id, attempt, delay_us, error)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "claimToken" }} = $1
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > now()
