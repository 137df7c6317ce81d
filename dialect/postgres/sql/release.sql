-- release: return rows $2 held by claim token $1 to pending without spending
-- an attempt (shutdown, destination down). Unlike the other fenced writes
-- this one does not require an unexpired lease: while the row is still
-- processing under our token nobody else holds it, and handing it back early
-- is what the expired-lease reaper would do anyway.
UPDATE {{ .Table }}
SET {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = now(),
{{- end }}
    {{ col "state" }} = {{ state "pending" }}
WHERE {{ col "id" }} = ANY({{ ids "$2" }})
  AND {{ col "claimToken" }} = $1
  AND {{ col "state" }} = {{ state "processing" }}
