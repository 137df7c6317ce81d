-- buckets retry: give rows $2 of member $1 a new attempt count ($5), a due
-- time of now() plus $6 microseconds and error text $7 (bucket mode). The
-- rows stay pending. Fenced like complete ($3 the buckets, $4 the epochs).
UPDATE {{ .Table }} AS o
SET
{{- template "retrySet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::bigint[], $5::integer[], $6::bigint[], $7::text[]) AS r(id, bucket, epoch, attempt, delay_us, error)
{{- template "bucketFence" (alias "r") }}
