-- buckets heartbeat: member $1 renews its membership for $2 microseconds,
-- if it has not ended, and learns how many members are live (itself
-- included). No row: the membership had ended, and another relay may own
-- its buckets by now.
UPDATE {{ .MemberTable }} AS me
SET expires_at = clock_timestamp() + $2::bigint * interval '1 microsecond'
WHERE me.member = $1::uuid
  AND me.expires_at > clock_timestamp()
RETURNING (SELECT count(*) FROM {{ .MemberTable }} AS m
           WHERE m.expires_at > clock_timestamp() AND m.member <> $1::uuid) + 1
