-- receive_push: store one message of a push source as sent (handed on) and,
-- in the same statement, write it to the outbox with the same id, unless
-- the source already has its idempotency key: then neither row is written.
-- Parameters as in receive.sql. The relay delivers the outbox row through
-- the routes like any other.
WITH received AS (
    INSERT INTO {{ .Table }} ({{ col "id" }}, {{ col "source" }}, {{ col "idempotencyKey" }}, {{ col "topic" }},
        {{ col "key" }}, {{ col "payload" }}, {{ col "headers" }}, {{ col "state" }})
    VALUES ($1::uuid, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, {{ state "sent" }})
    ON CONFLICT ({{ col "source" }}, {{ col "idempotencyKey" }}) DO NOTHING
    RETURNING 1
)
INSERT INTO {{ .Outbox }} ({{ ocol "id" }}, {{ ocol "topic" }}
{{- if ohas "key" }}, {{ ocol "key" }}{{ end }}, {{ ocol "payload" }}
{{- if ohas "headers" }}, {{ ocol "headers" }}{{ end }}
{{- if ohas "maxAttempts" }}, {{ ocol "maxAttempts" }}{{ end }})
SELECT $1::uuid, $4{{ if ohas "key" }}, $5{{ end }}, $6::text::jsonb
{{- if ohas "headers" }}, $7::text::jsonb{{ end }}
{{- if ohas "maxAttempts" }}, $8::integer{{ end }}
FROM received
