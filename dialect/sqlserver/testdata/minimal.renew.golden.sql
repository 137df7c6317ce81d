-- renew: extend by @lease_ms milliseconds the lease of every row still held
-- by claim token @token whose lease has not yet expired. With the bundled
-- indexes it reads outbox_processing_idx (in-flight rows only), so it never
-- waits on a row a producer is inserting.
UPDATE [outbox]
SET [lease_expires_at] = DATEADD(millisecond, CONVERT(INT, @lease_ms), SYSUTCDATETIME())
WHERE [claim_token] = @token
  AND [state] = N'processing'
  AND [lease_expires_at] > SYSUTCDATETIME();
