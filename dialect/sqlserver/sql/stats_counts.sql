-- stats_counts: rows per logical state and the age, in milliseconds on the
-- database clock, of the oldest due pending row (0 when none). Each count is
-- a range of the (state, scheduled_at) index; the oldest age is the first
-- entry of the pending range. No locking hint: under READ_COMMITTED_SNAPSHOT
-- the counts read committed versions and wait for nobody; READPAST would
-- make them undercount.
SELECT
    (SELECT COUNT_BIG(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "pending" }}),
    (SELECT COUNT_BIG(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "processing" }}),
    (SELECT COUNT_BIG(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "sent" }}),
    (SELECT COUNT_BIG(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "dead" }}),
{{- if or (has "scheduledAt") (has "createdAt") }}
    (SELECT COALESCE(DATEDIFF_BIG(millisecond, MIN({{ template "due" }}), SYSUTCDATETIME()), 0)
     FROM {{ .Table }}
     WHERE {{ col "state" }} = {{ state "pending" }}
       AND {{ template "due" }} <= SYSUTCDATETIME());
{{- else }}
    -- neither scheduledAt nor createdAt: the age of a pending row is unknown
    CAST(0 AS BIGINT);
{{- end }}
{{- define "due" }}{{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else }}{{ col "createdAt" }}{{ end }}{{ end }}
