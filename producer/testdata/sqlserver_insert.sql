INSERT INTO [outbox] ([id], [topic], [key], [payload], [headers], [aggregate_type], [state], [scheduled_at])
SELECT r.id, r.topic, r.[key], r.payload, r.headers, r.aggregate_type, N'pending', COALESCE(r.scheduled_at, DATEADD(microsecond, r.delay_us, DATEADD(second, r.delay_s, SYSUTCDATETIME())))
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
