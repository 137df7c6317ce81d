-- buckets claim: read up to .Limit ready rows of the buckets this relay owns
-- (relay.claimMode: buckets, buckets.go). Nothing is written: a claimed row
-- stays pending until it is settled, once, by a write fenced on the
-- ownership of its bucket. $1 is the relay's member id, $2 how long, in
-- microseconds, its membership must still run for the claim to return
-- anything, $3 the ids it has in flight, $4 the buckets it claims from
-- (NULL: all of them), $5 and $6 those buckets and the epochs under which
-- the relay believes it owns them, $7 and $8 the window's From and Skip
-- (claim_window.tmpl).
--
-- A row is ready when it is pending, due on the database clock, not in
-- flight here, in an owned bucket, and the head of its key: no pending or
-- processing row of the same non-empty key comes before it in (sequence,
-- id) order (head_of_key.tmpl). A key lives in one bucket, and a bucket has
-- one owner, so no other relay publishes the key's rows; a row in flight
-- here is still pending, so the key's next row is not a head until it is
-- settled.
--
-- The membership and ownership tests run once (they do not depend on the
-- row): a relay whose membership is about to end, whose buckets another
-- relay may then take, claims nothing; nor does a relay that believes it
-- owns a bucket that another relay took.
WITH {{ if .Window }}{{ template "windowCTE" . }},
{{ end }}candidates AS (
    SELECT c.{{ col "id" }},
           c.{{ col "id" }}::text AS qb_id,
           c.{{ col "topic" }} AS qb_topic,
           {{ if has "key" }}c.{{ col "key" }}{{ else }}NULL::text{{ end }} AS qb_key,
           c.{{ col "payload" }}::text AS qb_payload,
           {{ if has "headers" }}c.{{ col "headers" }}::text{{ else }}NULL::text{{ end }} AS qb_headers,
           {{ if has "aggregateType" }}c.{{ col "aggregateType" }}::text{{ else }}NULL::text{{ end }} AS qb_aggregate_type,
           {{ if has "attempt" }}c.{{ col "attempt" }}::integer{{ else }}0{{ end }} AS qb_attempt,
           {{ if not (has "attempt") }}1{{ else if has "maxAttempts" }}c.{{ col "maxAttempts" }}::integer{{ else }}0{{ end }} AS qb_max_attempts,
           c.{{ col "sequence" }}::bigint AS qb_sequence,
           {{ if has "createdAt" }}c.{{ col "createdAt" }}{{ else }}now(){{ end }} AS qb_created_at,
           {{ if has "scheduledAt" }}c.{{ col "scheduledAt" }}{{ else }}now(){{ end }} AS qb_scheduled_at
    FROM {{ .Table }} AS c
    WHERE EXISTS (SELECT 1 FROM {{ .MemberTable }} AS me
                  WHERE me.member = $1::uuid
                    AND me.expires_at >= clock_timestamp() + $2::bigint * interval '1 microsecond')
      AND NOT EXISTS (SELECT 1 FROM unnest($5::integer[], $6::bigint[]) AS mine(bucket, epoch)
                      WHERE NOT EXISTS (SELECT 1 FROM {{ .BucketTable }} AS b
                                        WHERE b.bucket = mine.bucket AND b.member = $1::uuid
                                          AND b.epoch = mine.epoch))
      AND c.{{ col "state" }} = {{ state "pending" }}
      {{ if has "scheduledAt" }}AND c.{{ col "scheduledAt" }} <= now(){{ end }}
{{- template "bucketRow" (alias "c") }}
{{- template "headOfKey" (alias "c") }}
{{- template "claimWindow" . }}
    ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
    LIMIT {{ .Limit }}
)
{{- if .Window }}
SELECT cl.qb_id, cl.qb_topic, cl.qb_key, cl.qb_payload, cl.qb_headers, cl.qb_aggregate_type,
       cl.qb_attempt, cl.qb_max_attempts, cl.qb_sequence, cl.qb_created_at, cl.qb_scheduled_at,
       nx.start, nx.next, nx.blockers
FROM (SELECT {{ template "windowStart" . }} AS start,
             {{ template "nextWindow" . }} AS next,
             {{ if has "key" }}{{ template "windowBlockers" . }}{{ else }}NULL::text[]{{ end }} AS blockers) AS nx
LEFT JOIN candidates AS cl ON true
{{- else }}
SELECT qb_id, qb_topic, qb_key, qb_payload, qb_headers, qb_aggregate_type,
       qb_attempt, qb_max_attempts, qb_sequence, qb_created_at, qb_scheduled_at
FROM candidates
{{- end }}
