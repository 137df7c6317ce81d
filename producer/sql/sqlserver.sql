-- insert: every message of one Write (or one run of it, see writer.go) in
-- one statement. @p1 is a JSON array with one object per message, in call
-- order; "ord" is its position. OPENJSON (SQL Server 2016+, compatibility
-- level 130) turns it into rows, so one parameter carries any number of
-- messages and the 2100-parameter limit never applies. The ORDER BY makes
-- the sequence default follow the call order; times come from the database
-- clock in UTC (SYSUTCDATETIME() + delay) unless the caller set one. The
-- payload arrives as a JSON string holding the payload's JSON text (AS JSON
-- would turn a scalar payload into NULL); headers are always an object.
INSERT INTO {{ .Table }} ({{ col "id" }}, {{ col "topic" }}{{ if has "key" }}, {{ col "key" }}{{ end }}, {{ col "payload" }}{{ if has "headers" }}, {{ col "headers" }}{{ end }}{{ if has "aggregateType" }}, {{ col "aggregateType" }}{{ end }}, {{ col "state" }}{{ if has "scheduledAt" }}, {{ col "scheduledAt" }}{{ end }}{{ if .MaxAttempts }}, {{ col "maxAttempts" }}{{ end }})
SELECT r.id, r.topic{{ if has "key" }}, r.[key]{{ end }}, r.payload{{ if has "headers" }}, r.headers{{ end }}{{ if has "aggregateType" }}, r.aggregate_type{{ end }}, {{ state "pending" }}{{ if has "scheduledAt" }}, COALESCE(r.scheduled_at, DATEADD(microsecond, r.delay_us, DATEADD(second, r.delay_s, SYSUTCDATETIME()))){{ end }}{{ if .MaxAttempts }}, r.max_attempts{{ end }}
FROM OPENJSON(@p1) WITH (
    ord INT '$.ord',
    id UNIQUEIDENTIFIER '$.id',
    topic NVARCHAR(255) '$.topic',
    [key] NVARCHAR(255) '$.key',
    payload NVARCHAR(MAX) '$.payload',
    headers NVARCHAR(MAX) '$.headers' AS JSON,
    aggregate_type NVARCHAR(255) '$.aggregate_type',
    scheduled_at DATETIME2 '$.scheduled_at',
    delay_s INT '$.delay_s',
    delay_us INT '$.delay_us',
    max_attempts INT '$.max_attempts'
) AS r
ORDER BY r.ord;
