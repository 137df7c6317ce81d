-- buckets complete: mark rows $2 sent, for member $1 (bucket mode). Fenced on
-- the ownership of each row's bucket: $3 are the rows' buckets, as the relay
-- computed them (and the server checks), $4 the epochs under which the relay
-- owned them when it claimed the rows; the relay must still own each
-- bucket under that epoch, and its membership must not have ended, or
-- another relay may own the bucket by now and deliver the row itself. The
-- row must still be pending. The buckets the relay owns are read once (a
-- hashed set of at most BucketCount pairs), so each row costs one probe of
-- the id: a join of the bucket table on the rows' epochs made the planner
-- pair every row with every bucket first.
UPDATE {{ .Table }} AS o
SET
{{- template "sentSet" . }}
FROM unnest({{ ids "$2" }}, $3::integer[], $4::bigint[]) AS r(id, bucket, epoch)
{{- template "bucketFence" (alias "r") }}
