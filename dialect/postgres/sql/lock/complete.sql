-- lock complete: mark rows $1, locked by this batch's transaction, sent.
-- The lock is the fence: no token or lease is needed.
UPDATE {{ .Table }}
SET
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
WHERE {{ col "id" }} = ANY({{ ids "$1" }})
  AND {{ col "state" }} = {{ state "pending" }}
