-- unmapped_states: the values of the state column that no state of the
-- mapping names ($1, a text array of the mapped values), with their rows,
-- most rows first, at most 10. NULL counts as such a value. It reads the
-- whole table; `queuebox check` runs it under a statement timeout
-- (inspect.go, UnmappedStates).
SELECT {{ col "state" }}::text, {{ col "state" }} IS NULL, count(*)
FROM {{ .Table }}
WHERE {{ col "state" }} IS NULL OR NOT ({{ col "state" }}::text = ANY($1::text[]))
GROUP BY 1, 2
ORDER BY 3 DESC
LIMIT 10
