-- buckets acquire: member $1 takes buckets $2, each only if no member owns
-- it, its owner's membership has ended, or it is $1's own from before its
-- membership ended (its rows in flight then are fenced out by the new
-- epoch); the epoch grows by one. Run under the buckets lock (lock.sql),
-- after expire.sql.
UPDATE {{ .BucketTable }} AS b
SET member = $1::uuid, epoch = b.epoch + 1, acquired_at = now()
WHERE b.bucket = ANY($2::integer[])
  AND (b.member IS NULL
       OR b.member = $1::uuid
       OR NOT EXISTS (SELECT 1 FROM {{ .MemberTable }} AS m
                      WHERE m.member = b.member AND m.expires_at > clock_timestamp()))
RETURNING b.bucket, b.epoch
