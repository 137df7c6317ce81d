-- complete: mark rows $2 held by claim token $1 sent. Fenced on id, state,
-- token and an unexpired lease. The claim token and claimed_at stay on the
-- row as a record of which claim delivered it; the lease is cleared.
-- Optional columns (has) are written only when the table has them.
-- The ids arrive as an array joined with unnest rather than = ANY(array):
-- with = ANY the planner may walk the state index and test every row against
-- the whole array (rows x ids comparisons, ~1 s per 1,000-row batch seen in
-- the benchmark); the join hashes the ids or probes the primary key.
UPDATE {{ .Table }} AS o
SET {{ col "leaseExpiresAt" }} = NULL,
{{- template "sentSet" . }}
FROM unnest({{ ids "$2" }}) AS r(id)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "claimToken" }} = $1
  AND o.{{ col "state" }} = {{ state "processing" }}
  AND o.{{ col "leaseExpiresAt" }} > now()
