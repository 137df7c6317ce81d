-- buckets release: member $1 gives up buckets $2 (with epochs $3) that it
-- has no rows in flight in, so that another relay may take them at once.
UPDATE {{ .BucketTable }} AS b
SET member = NULL
FROM unnest($2::integer[], $3::bigint[]) AS r(bucket, epoch)
WHERE b.bucket = r.bucket AND b.member = $1::uuid AND b.epoch = r.epoch
