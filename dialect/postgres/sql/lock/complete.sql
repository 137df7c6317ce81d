-- lock complete: mark rows $1, locked by this batch's transaction, sent.
-- The lock is the fence: no token or lease is needed.
-- The ids arrive as an array joined with unnest rather than = ANY(array):
-- with = ANY the planner may walk the state index and test every row against
-- the whole array (rows x ids comparisons, ~1 s per 1,000-row batch seen in
-- the benchmark); the join hashes the ids or probes the primary key.
UPDATE {{ .Table }} AS o
SET
{{- template "sentSet" . }}
FROM unnest({{ ids "$1" }}) AS r(id)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "state" }} = {{ state "pending" }}
