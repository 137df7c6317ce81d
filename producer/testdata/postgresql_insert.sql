WITH ins AS (
    INSERT INTO "outbox" ("id", "topic", "key", "payload", "headers", "aggregate_type", "state", "scheduled_at")
    SELECT r.id, r.topic, r.key, e.v -> 'payload', r.headers, r.aggregate_type, 'pending', COALESCE(r.scheduled_at, now() + r.delay_us * interval '1 microsecond')
    FROM jsonb_array_elements($1::jsonb) AS e(v),
         jsonb_to_record(e.v) AS r(ord integer, id uuid, topic text, key text, headers jsonb, aggregate_type text, scheduled_at timestamptz, delay_us bigint, max_attempts integer)
    ORDER BY r.ord
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins)
