-- complete: mark rows $2 held by claim token $1 sent. Fenced on id, state,
-- token and an unexpired lease. The claim token and claimed_at stay on the
-- row as a record of which claim delivered it; the lease is cleared.
-- Optional columns (has) are written only when the table has them.
UPDATE {{ .Table }}
SET {{ col "leaseExpiresAt" }} = NULL,
{{- if has "lastError" }}
    {{ col "lastError" }} = NULL,
{{- end }}
{{- if has "sentAt" }}
    {{ col "sentAt" }} = now(),
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = now(),
{{- end }}
    {{ col "state" }} = {{ state "sent" }}
WHERE {{ col "id" }} = ANY({{ ids "$2" }})
  AND {{ col "claimToken" }} = $1
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
