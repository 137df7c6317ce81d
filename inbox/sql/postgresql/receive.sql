-- receive: store one message of a pull source, pending for its Worker, unless
-- the source already has its idempotency key. $1 id, $2 source, $3
-- idempotency key, $4 topic, $5 key (NULL: none), $6 payload (JSON text),
-- $7 headers (JSON text), $8 max attempts.
-- One row affected: new; none: a duplicate.
INSERT INTO {{ .Table }} ({{ col "id" }}, {{ col "source" }}, {{ col "idempotencyKey" }}, {{ col "topic" }},
    {{ col "key" }}, {{ col "payload" }}, {{ col "headers" }}, {{ col "maxAttempts" }})
VALUES ($1::uuid, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, $8::integer)
ON CONFLICT ({{ col "source" }}, {{ col "idempotencyKey" }}) DO NOTHING
