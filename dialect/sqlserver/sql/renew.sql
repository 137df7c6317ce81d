-- renew: extend by @lease_ms milliseconds the lease of every row still held
-- by claim token @token whose lease has not yet expired. With the bundled
-- indexes it reads outbox_processing_idx (in-flight rows only), so it never
-- waits on a row a producer is inserting.
UPDATE {{ .Table }}
SET {{ col "leaseExpiresAt" }} = DATEADD(millisecond, CONVERT(INT, @lease_ms), SYSUTCDATETIME())
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = SYSUTCDATETIME()
{{- end }}
WHERE {{ col "claimToken" }} = @token
  AND {{ col "state" }} = {{ state "processing" }}
  AND {{ col "leaseExpiresAt" }} > SYSUTCDATETIME();
