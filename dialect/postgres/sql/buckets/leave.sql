-- buckets leave: member $1 ends its membership (shutdown), after releasing
-- its buckets.
DELETE FROM {{ .MemberTable }} AS m
WHERE m.member = $1::uuid
