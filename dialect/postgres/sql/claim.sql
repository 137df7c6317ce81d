-- claim: move up to $2 ready rows to processing under claim token $1 for a
-- lease of $3 microseconds, in one statement. See doc.go and docs/claim.md.
--
-- A row is ready when it is pending, due on the database clock, and the head
-- of its key: no pending or processing row of the same non-empty key comes
-- before it in (sequence, id) order. The readiness condition appears twice:
-- in the locking SELECT (PostgreSQL re-evaluates it against the newest row
-- version after a lock wait) and again in the UPDATE, so a row that another
-- claimer claimed and committed meanwhile is never claimed twice.
--
-- With relay.onDead: hold (.Hold), a dead row whose held_at is set also
-- comes before the key's later rows and keeps them waiting, until it is
-- replayed or `queuebox dead release` clears held_at. That probe is a second
-- NOT EXISTS so that each probe has its own partial index.
WITH candidates AS (
    SELECT c.{{ col "id" }}
    FROM {{ .Table }} AS c
    WHERE c.{{ col "state" }} = {{ state "pending" }}
      AND c.{{ col "scheduledAt" }} <= now()
      AND (c.{{ col "key" }} IS NULL OR c.{{ col "key" }} = ''
           OR NOT EXISTS (
               SELECT 1
               FROM {{ .Table }} AS b
               WHERE b.{{ col "key" }} = c.{{ col "key" }}
                 AND b.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
                 AND b.{{ col "sequence" }} <= c.{{ col "sequence" }}
                 AND (b.{{ col "sequence" }} < c.{{ col "sequence" }} OR b.{{ col "id" }} < c.{{ col "id" }}))
{{- if .Hold }}
               AND NOT EXISTS (
                   SELECT 1
                   FROM {{ .Table }} AS h
                   WHERE h.{{ col "key" }} = c.{{ col "key" }}
                     AND h.{{ col "state" }} = {{ state "dead" }}
                     AND h.{{ col "heldAt" }} IS NOT NULL
                     AND h.{{ col "sequence" }} <= c.{{ col "sequence" }}
                     AND (h.{{ col "sequence" }} < c.{{ col "sequence" }} OR h.{{ col "id" }} < c.{{ col "id" }}))
{{- end }})
    ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
    LIMIT $2
    FOR UPDATE OF c SKIP LOCKED
)
UPDATE {{ .Table }} AS o
SET {{ col "state" }} = {{ state "processing" }},
    {{ col "claimToken" }} = $1,
    {{ col "claimedAt" }} = now(),
    {{ col "leaseExpiresAt" }} = now() + $3::bigint * interval '1 microsecond',
    {{ col "updatedAt" }} = now()
FROM candidates
WHERE o.{{ col "id" }} = candidates.{{ col "id" }}
  AND o.{{ col "state" }} = {{ state "pending" }}
  AND o.{{ col "scheduledAt" }} <= now()
  AND (o.{{ col "key" }} IS NULL OR o.{{ col "key" }} = ''
       OR NOT EXISTS (
           SELECT 1
           FROM {{ .Table }} AS b
           WHERE b.{{ col "key" }} = o.{{ col "key" }}
             AND b.{{ col "state" }} IN ({{ state "pending" }}, {{ state "processing" }})
             AND b.{{ col "sequence" }} <= o.{{ col "sequence" }}
             AND (b.{{ col "sequence" }} < o.{{ col "sequence" }} OR b.{{ col "id" }} < o.{{ col "id" }}))
{{- if .Hold }}
       AND NOT EXISTS (
           SELECT 1
           FROM {{ .Table }} AS h
           WHERE h.{{ col "key" }} = o.{{ col "key" }}
             AND h.{{ col "state" }} = {{ state "dead" }}
             AND h.{{ col "heldAt" }} IS NOT NULL
             AND h.{{ col "sequence" }} <= o.{{ col "sequence" }}
             AND (h.{{ col "sequence" }} < o.{{ col "sequence" }} OR h.{{ col "id" }} < o.{{ col "id" }}))
{{- end }})
RETURNING o.{{ col "id" }}::text,
          o.{{ col "topic" }},
          o.{{ col "key" }},
          o.{{ col "payload" }}::text,
          o.{{ col "headers" }}::text,
          o.{{ col "aggregateType" }},
          o.{{ col "attempt" }},
          o.{{ col "maxAttempts" }},
          o.{{ col "sequence" }},
          o.{{ col "createdAt" }},
          o.{{ col "scheduledAt" }}
