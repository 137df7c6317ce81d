-- buckets dead: move rows $2 of member $1 to dead with attempt count $5 and
-- reason $6 (bucket mode). Fenced like complete ($3 the buckets, $4 the
-- epochs).
UPDATE {{ .Table }} AS o
SET
{{- template "deadSet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::bigint[], $5::integer[], $6::text[]) AS d(id, bucket, epoch, attempt, error)
{{- template "bucketFence" (alias "d") }}
