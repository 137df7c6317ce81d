-- replay_select: the ids of the rows a replay would move, in (sequence, id)
-- order so that batches follow per-key order: rows stored as $1 (the dead or
-- sent state), with id in $2, topic matching the regular expression $3, key
-- $4, updated at or after $5 and before $6, and at or after $7 and before $8
-- microseconds before now() on the database clock; a NULL selector matches
-- all.
SELECT r.{{ col "id" }}::text
FROM {{ .Table }} AS r
{{- template "replayFilter" . }}
ORDER BY r.{{ col "sequence" }}, r.{{ col "id" }}
