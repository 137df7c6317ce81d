-- buckets dead: move rows $2 of member $1 to dead with attempt count $5 and
-- reason $6 (bucket mode). Fenced like complete ($3 the buckets, $4 the
-- epochs).
UPDATE {{ .Table }} AS o
SET
{{- template "deadSet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::bigint[], $5::integer[], $6::text[]) AS d(id, bucket, epoch, attempt, error)
WHERE o.{{ col "id" }} = d.id
  AND o.{{ col "state" }} = {{ state "pending" }}
  AND d.bucket = {{ template "bucketOf" (alias "o") }}
  AND (d.bucket, d.epoch) IN (SELECT b.bucket, b.epoch FROM {{ .BucketTable }} AS b WHERE b.member = $1::uuid)
  AND EXISTS (SELECT 1 FROM {{ .MemberTable }} AS me
              WHERE me.member = $1::uuid AND me.expires_at > clock_timestamp())
