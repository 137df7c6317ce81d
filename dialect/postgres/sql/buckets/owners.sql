-- buckets owners: every bucket, its owner if that owner's membership has not
-- ended, and the epoch; and the number of live members.
SELECT b.bucket, b.member::text, b.epoch,
       (b.member IS NOT NULL AND EXISTS (
            SELECT 1 FROM {{ .MemberTable }} AS m
            WHERE m.member = b.member AND m.expires_at > clock_timestamp())) AS live
FROM {{ .BucketTable }} AS b
ORDER BY b.bucket
