-- insert: every message of one Write (or one run of it, see writer.go) in
-- one statement. $1 is a JSON array with one object per message, in call
-- order; "ord" is its position. jsonb_to_record turns each into a row, the
-- payload is taken as jsonb from the element (jsonb_to_record would make a
-- JSON null payload an SQL NULL, which the NOT NULL column refuses, and the
-- failed INSERT would abort the caller's transaction), the
-- ORDER BY makes the sequence default follow the call order, and the
-- scheduled time falls back to the database clock (now() + delay).
-- {{ if .Notify }}$2 is the NOTIFY channel: pg_notify runs in the same
-- transaction, so the notification is delivered at commit, never before.
-- It runs only while a relay sleeps on the channel (the relay holds the
-- advisory lock {{ .LockClass }}/hashtext(channel) then): a NOTIFY serialises
-- commits, and a relay that is awake needs none. Taking the lock shared
-- when no relay sleeps makes a relay about to sleep wait for this commit
-- (the relay's notify/trigger.sql says more).{{ end }}
WITH ins AS (
    INSERT INTO {{ .Table }} ({{ col "id" }}, {{ col "topic" }}{{ if has "key" }}, {{ col "key" }}{{ end }}, {{ col "payload" }}{{ if has "headers" }}, {{ col "headers" }}{{ end }}{{ if has "aggregateType" }}, {{ col "aggregateType" }}{{ end }}, {{ col "state" }}{{ if has "scheduledAt" }}, {{ col "scheduledAt" }}{{ end }}{{ if .MaxAttempts }}, {{ col "maxAttempts" }}{{ end }})
    SELECT r.id, r.topic{{ if has "key" }}, r.key{{ end }}, e.v -> 'payload'{{ if has "headers" }}, r.headers{{ end }}{{ if has "aggregateType" }}, r.aggregate_type{{ end }}, {{ state "pending" }}{{ if has "scheduledAt" }}, COALESCE(r.scheduled_at, now() + r.delay_us * interval '1 microsecond'){{ end }}{{ if .MaxAttempts }}, r.max_attempts{{ end }}
    FROM jsonb_array_elements($1::jsonb) AS e(v),
         jsonb_to_record(e.v) AS r(ord integer, id uuid, topic text, key text, headers jsonb, aggregate_type text, scheduled_at timestamptz, delay_us bigint, max_attempts integer)
    ORDER BY r.ord
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins){{ if .Notify }} FROM (SELECT CASE WHEN NOT pg_try_advisory_xact_lock_shared({{ .LockClass }}, hashtext($2)) THEN pg_notify($2, '') END) AS n{{ end }}
