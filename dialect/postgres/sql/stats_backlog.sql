-- stats_backlog: the $1 topics with the most pending rows, with the age in
-- seconds of each topic's oldest due pending row (0 when none is due yet).
-- Reads every pending row once (on the bundled table through a partial index
-- of pending rows): its cost grows with the backlog, not the table.
SELECT {{ col "topic" }},
       count(*),
       COALESCE(EXTRACT(EPOCH FROM now() - min({{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }})
                FILTER (WHERE {{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }} <= now())), 0)::float8
FROM {{ .Table }}
WHERE {{ col "state" }} = {{ state "pending" }}
GROUP BY {{ col "topic" }}
ORDER BY count(*) DESC, {{ col "topic" }}
LIMIT $1
