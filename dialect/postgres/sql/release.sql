-- release: return rows $2 held by claim token $1 to pending without spending
-- an attempt (shutdown, destination down). Unlike the other fenced writes
-- this one does not require an unexpired lease: while the row is still
-- processing under our token nobody else holds it, and handing it back early
-- is what the expired-lease reaper would do anyway.
-- The ids arrive as an array joined with unnest rather than = ANY(array):
-- with = ANY the planner may walk the state index and test every row against
-- the whole array (rows x ids comparisons, ~1 s per 1,000-row batch seen in
-- the benchmark); the join hashes the ids or probes the primary key.
UPDATE {{ .Table }} AS o
SET {{ col "claimToken" }} = NULL,
    {{ col "claimedAt" }} = NULL,
    {{ col "leaseExpiresAt" }} = NULL,
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = now(),
{{- end }}
    {{ col "state" }} = {{ state "pending" }}
FROM unnest({{ ids "$2" }}) AS r(id)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "claimToken" }} = $1
  AND o.{{ col "state" }} = {{ state "processing" }}
