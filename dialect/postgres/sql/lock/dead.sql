-- lock dead: move rows $1 to dead with attempt count $2 and reason $3. With
-- relay.onDead: hold a keyed row's held_at is set (see ../dead.sql).
UPDATE {{ .Table }} AS o
SET
{{- if has "attempt" }}
    {{ col "attempt" }} = d.attempt,
{{- end }}
{{- if has "lastError" }}
    {{ col "lastError" }} = {{ errorText "d.error" }},
{{- end }}
{{- if .Hold }}
    {{ col "heldAt" }} = CASE WHEN o.{{ col "key" }} IS NULL OR o.{{ col "key" }} = '' THEN NULL ELSE now() END,
{{- end }}
{{- if has "updatedAt" }}
    {{ col "updatedAt" }} = now(),
{{- end }}
    {{ col "state" }} = {{ state "dead" }}
FROM unnest({{ ids "$1" }}, $2::integer[], $3::text[]) AS d(id, attempt, error)
WHERE o.{{ col "id" }} = d.id
  AND o.{{ col "state" }} = {{ state "pending" }}
