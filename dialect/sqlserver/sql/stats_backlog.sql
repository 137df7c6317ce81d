-- stats_backlog: the @n topics with the most pending rows, with the age in
-- milliseconds of each topic's oldest due pending row (0 when none is due
-- yet). Reads every pending row once (the pending range of the (state,
-- scheduled_at) index): its cost grows with the backlog, not the table.
SELECT TOP (@n)
       s.{{ col "topic" }},
       COUNT_BIG(*),
{{- if or (has "scheduledAt") (has "createdAt") }}
       COALESCE(DATEDIFF_BIG(millisecond,
                MIN(CASE WHEN s.{{ template "due" }} <= SYSUTCDATETIME() THEN s.{{ template "due" }} END),
                SYSUTCDATETIME()), 0)
{{- else }}
       CAST(0 AS BIGINT)
{{- end }}
FROM {{ .Table }} AS s
WHERE s.{{ col "state" }} = {{ state "pending" }}
GROUP BY s.{{ col "topic" }}
ORDER BY COUNT_BIG(*) DESC, s.{{ col "topic" }};
{{- define "due" }}{{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else }}{{ col "createdAt" }}{{ end }}{{ end }}
