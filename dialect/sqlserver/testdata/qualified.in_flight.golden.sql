-- in_flight: 1 when some relay has a batch in flight on the table (a row in
-- the processing state under an unexpired lease, on the database clock),
-- else 0 (dialect.InFlightReporter). The engine asks it before a second,
-- unbounded claim after an empty one (relay/claim.go). No locking hint,
-- like stats_counts: under READ_COMMITTED_SNAPSHOT it reads committed
-- versions and waits for nobody; READPAST would skip the very rows a claim
-- or a completion is writing.
SELECT CASE WHEN EXISTS (
    SELECT 1
    FROM [dbo].[outbox] AS p
    WHERE p.[state] = N'processing'
      AND p.[lease_expires_at] > SYSUTCDATETIME()
) THEN 1 ELSE 0 END;
