-- buckets acquire: member $1 takes buckets $2, each only if no member owns
-- it or its owner's membership has ended; the epoch grows by one. Run under
-- the buckets lock (lock.sql).
UPDATE {{ .BucketTable }} AS b
SET member = $1::uuid, epoch = b.epoch + 1, acquired_at = now()
WHERE b.bucket = ANY($2::integer[])
  AND (b.member IS NULL
       OR NOT EXISTS (SELECT 1 FROM {{ .MemberTable }} AS m
                      WHERE m.member = b.member AND m.expires_at > clock_timestamp()))
RETURNING b.bucket, b.epoch
