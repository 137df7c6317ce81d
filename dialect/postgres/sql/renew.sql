-- renew: extend by $2 microseconds the lease of every row still held by
-- claim token $1 whose lease has not yet expired. Touches no indexed column,
-- so it is a HOT update when the page has room.
UPDATE {{ .Table }}
SET {{ col "leaseExpiresAt" }} = now() + $2::bigint * interval '1 microsecond'
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = now()
{{- end }}
WHERE {{ col "claimToken" }} = $1
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > now()
