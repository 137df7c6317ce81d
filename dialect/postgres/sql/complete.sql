-- complete: mark rows $2 held by claim token $1 sent. Fenced on id, state,
-- token and an unexpired lease. The claim token and claimed_at stay on the
-- row as a record of which claim delivered it; the lease is cleared.
UPDATE {{ .Table }}
SET {{ col "state" }} = {{ state "sent" }},
    {{ col "leaseExpiresAt" }} = NULL,
    {{ col "lastError" }} = NULL,
{{- if has "sentAt" }}
    {{ col "sentAt" }} = now(),
{{- end }}
    {{ col "updatedAt" }} = now()
WHERE {{ col "id" }} = ANY($2::uuid[])
  AND {{ col "claimToken" }} = $1
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
