-- stats_held_keys: up to $1 keys held by a dead row (relay.onDead: hold)
-- while later rows of the key wait: the key, the holding dead row (the
-- key's lowest held one) and how many pending or processing rows wait
-- behind it, most waiting first. Without hold nothing is held and the query
-- returns no rows without reading the table.
{{- if .Hold }}
SELECT held.key, held.id, held.waiting
FROM (
    SELECT h.{{ col "key" }} AS key,
           h.{{ col "id" }}::text AS id,
           (SELECT count(*)
            FROM {{ .Table }} AS w
            WHERE w.{{ col "key" }} = h.{{ col "key" }}
              AND w.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
              AND w.{{ col "sequence" }} > h.{{ col "sequence" }}) AS waiting
    FROM (
        SELECT DISTINCT ON (d.{{ col "key" }}) d.{{ col "key" }}, d.{{ col "id" }}, d.{{ col "sequence" }}
        FROM {{ .Table }} AS d
        WHERE d.{{ col "state" }} = {{ state "dead" }}
          AND d.{{ col "heldAt" }} IS NOT NULL
          AND d.{{ col "key" }} <> ''
        ORDER BY d.{{ col "key" }}, d.{{ col "sequence" }}, d.{{ col "id" }}
    ) AS h
) AS held
WHERE held.waiting > 0
ORDER BY held.waiting DESC, held.key
LIMIT $1
{{- else }}
SELECT NULL::text, NULL::text, 0::bigint WHERE $1::int IS NULL AND false
{{- end }}
