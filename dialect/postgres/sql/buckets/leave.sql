-- buckets leave: member $1 ends its membership (shutdown), after releasing
-- its buckets; and memberships that ended more than $2 microseconds ago go.
DELETE FROM {{ .MemberTable }} AS m
WHERE m.member = $1::uuid
   OR m.expires_at < clock_timestamp() - $2::bigint * interval '1 microsecond'
