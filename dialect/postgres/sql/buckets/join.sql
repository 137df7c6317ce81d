-- buckets join: member $1 (named $2) joins, or renews a membership that
-- had ended, for $3 microseconds.
INSERT INTO {{ .MemberTable }} (member, name, expires_at)
VALUES ($1::uuid, $2::text, clock_timestamp() + $3::bigint * interval '1 microsecond')
ON CONFLICT (member) DO UPDATE
SET expires_at = EXCLUDED.expires_at, joined_at = now(), name = EXCLUDED.name
