-- stats_counts: rows per logical state and the age, in seconds on the
-- database clock, of the oldest due pending row (0 when none). On the
-- bundled table each count reads one partial index of its state
-- (outbox_pending_scheduled_idx, outbox_processing_idx, outbox_finished_idx;
-- an index-only scan once the visibility map is set), so it reads that
-- state's rows and nothing else; the oldest age is the first entry of the
-- pending index. $1 false skips the count of sent rows, the one that grows
-- with the table (StatsParams.WithoutSent): the planner turns the condition
-- into a one-time filter, and the sent range is not read. The last two read
-- the processing rows (outbox_processing_idx, by claimed_at): how long ago
-- the oldest was claimed, and how many have an expired lease (their relay
-- stopped renewing: a reaper returns them within relay.reapInterval); 0
-- when the table has no such column (lock mode on an adopted table).
SELECT
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "pending" }}),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "processing" }}),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "sent" }} AND $1::boolean),
    (SELECT count(*) FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "dead" }}),
    (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min({{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }})), 0)::float8
     FROM {{ .Table }}
     WHERE {{ col "state" }} = {{ state "pending" }}
       AND {{ if has "scheduledAt" }}{{ col "scheduledAt" }}{{ else if has "createdAt" }}{{ col "createdAt" }}{{ else }}now(){{ end }} <= now()),
{{- if has "claimedAt" }}
    (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min({{ col "claimedAt" }})), 0)::float8
     FROM {{ .Table }} WHERE {{ col "state" }} = {{ state "processing" }}),
{{- else }}
    0::float8,
{{- end }}
{{- if has "leaseExpiresAt" }}
    (SELECT count(*) FROM {{ .Table }}
     WHERE {{ col "state" }} = {{ state "processing" }} AND {{ col "leaseExpiresAt" }} <= now())
{{- else }}
    0::bigint
{{- end }}
