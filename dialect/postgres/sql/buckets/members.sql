-- buckets members: the group as operators see it: each member, whether its
-- membership still runs and for how many milliseconds (negative: ended that
-- long ago), and how many buckets it owns; then one row with a NULL member
-- for the buckets no one owns.
SELECT m.member::text, m.name, m.expires_at > clock_timestamp(),
       (extract(epoch FROM m.expires_at - clock_timestamp()) * 1000)::bigint,
       (SELECT count(*) FROM {{ .BucketTable }} AS b WHERE b.member = m.member)
FROM {{ .MemberTable }} AS m
UNION ALL
SELECT NULL, '', false, 0, count(*)
FROM {{ .BucketTable }} AS b
WHERE b.member IS NULL
   OR NOT EXISTS (SELECT 1 FROM {{ .MemberTable }} AS m WHERE m.member = b.member)
