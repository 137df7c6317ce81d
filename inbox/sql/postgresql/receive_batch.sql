-- receive_batch: store the messages of several concurrent receives in one
-- statement and one commit. Each element is stored as in receive.sql (pull,
-- $9 true: pending) or receive_push.sql (push: sent, and written to the
-- outbox with the same id), unless its source already has its idempotency
-- key, earlier in the table or in this batch. Returns the ids stored; an id
-- not returned is a duplicate.
WITH batch AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::integer[], $9::boolean[])
        WITH ORDINALITY AS r(id, source, idempotency_key, topic, key, payload, headers, max_attempts, pull, n)
),
received AS (
    INSERT INTO {{ .Table }} ({{ col "id" }}, {{ col "source" }}, {{ col "idempotencyKey" }}, {{ col "topic" }},
        {{ col "key" }}, {{ col "payload" }}, {{ col "headers" }}, {{ col "maxAttempts" }}, {{ col "state" }})
    SELECT id, source, idempotency_key, topic, key, payload::jsonb, headers::jsonb, max_attempts,
           CASE WHEN pull THEN {{ state "pending" }} ELSE {{ state "sent" }} END
    FROM batch
    ORDER BY n
    ON CONFLICT ({{ col "source" }}, {{ col "idempotencyKey" }}) DO NOTHING
    RETURNING {{ col "id" }} AS id
),
handed AS (
    INSERT INTO {{ .Outbox }} ({{ ocol "id" }}, {{ ocol "topic" }}
    {{- if ohas "key" }}, {{ ocol "key" }}{{ end }}, {{ ocol "payload" }}
    {{- if ohas "headers" }}, {{ ocol "headers" }}{{ end }}
    {{- if ohas "maxAttempts" }}, {{ ocol "maxAttempts" }}{{ end }})
    SELECT b.id, b.topic{{ if ohas "key" }}, b.key{{ end }}, b.payload::jsonb
    {{- if ohas "headers" }}, b.headers::jsonb{{ end }}
    {{- if ohas "maxAttempts" }}, b.max_attempts{{ end }}
    FROM batch AS b JOIN received AS r ON r.id = b.id
    WHERE NOT b.pull
    ORDER BY b.n
)
SELECT id::text FROM received
