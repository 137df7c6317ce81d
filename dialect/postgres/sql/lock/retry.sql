-- lock retry: keep rows $1 pending with a new attempt count ($2), due $3
-- microseconds from now, with error text $4. Without a scheduledAt column
-- the row is due again at once; without attempt it is not counted.
UPDATE {{ .Table }} AS o
SET
{{- template "retrySet" . }}
FROM unnest({{ ids "$1" }}, $2::integer[], $3::bigint[], $4::text[]) AS r(id, attempt, delay_us, error)
WHERE o.{{ col "id" }} = r.id
  AND o.{{ col "state" }} = {{ state "pending" }}
