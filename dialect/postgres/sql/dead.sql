-- dead: move rows held by claim token $1 to dead, each with its own attempt
-- count ($3) and reason ($4), for ids $2. Fenced like complete. The claim
-- token and claimed_at stay as a record of the last claim; the lease is
-- cleared. A dead row no longer blocks its key, unless the dialect holds
-- keys (relay.onDead: hold): then a keyed row's held_at is set and the claim
-- keeps the key's later rows waiting behind it.
UPDATE {{ .Table }} AS o
SET {{ col "leaseExpiresAt" }} = NULL,
{{- template "deadSet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::text[]) AS d(id, attempt, error)
WHERE o.{{ col "id" }} = d.id
  AND o.{{ col "claimToken" }} = $1
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > now()
