-- lock dead: move rows $1 to dead with attempt count $2 and reason $3. With
-- relay.onDead: hold a keyed row's held_at is set (see ../dead.sql).
UPDATE {{ .Table }} AS o
SET
{{- template "deadSet" . }}
FROM unnest({{ ids "$1" }}, $2::integer[], $3::text[]) AS d(id, attempt, error)
WHERE o.{{ col "id" }} = d.id
  AND o.{{ col "state" }} = {{ state "pending" }}
