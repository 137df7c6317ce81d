-- buckets complete: mark rows $2 sent, for member $1 (bucket mode). Fenced on
-- the ownership of the rows' buckets: $3 are the buckets of the rows, as the
-- relay computed them, and $4 the epochs under which the relay owned them
-- when it claimed the rows. A row is settled only when its bucket, as the
-- server computes it, is one of those that member $1 still owns under that
-- epoch, and its membership has not ended: otherwise another relay may own
-- the bucket by now and deliver the row itself. The row must still be
-- pending. The buckets still owned are read once, into an array of at most
-- BucketCount entries, so that the rows are found by one scan of the
-- primary key, as any other update of a batch of ids: a join of the rows
-- on their buckets made the planner probe the key once per row.
UPDATE {{ .Table }} AS o
SET
{{- template "sentSet" . }}
WHERE o.{{ col "id" }} = ANY({{ ids "$2" }})
  AND o.{{ col "state" }} = {{ state "pending" }}
  AND {{ template "bucketOf" (alias "o") }} = ANY(ARRAY(
      SELECT b.bucket FROM {{ .BucketTable }} AS b
      JOIN unnest($3::integer[], $4::bigint[]) AS r(bucket, epoch) ON b.bucket = r.bucket AND b.epoch = r.epoch
      WHERE b.member = $1::uuid))
  AND EXISTS (SELECT 1 FROM {{ .MemberTable }} AS me
              WHERE me.member = $1::uuid AND me.expires_at > clock_timestamp())
