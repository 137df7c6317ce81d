-- stats_counts: rows per logical state and the age, in seconds on the
-- database clock, of the oldest due pending row (0 when none). Each count is
-- a range of the (state, scheduled_at) index (an index-only scan once the
-- visibility map is set), so it reads that state's rows of the index and
-- nothing else; the oldest age is the first entry of the pending range.
SELECT
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "pending" }}),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "processing" }}),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "sent" }}),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "dead" }}),
    (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min({{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }})), 0)::float8
     FROM {{ .Table }}
     WHERE {{ col "state" }} = {{ state "pending" }}
       AND {{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }} <= now())
