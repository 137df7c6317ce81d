-- buckets expire: delete the memberships that have ended, under the buckets
-- lock (lock.sql), before the ownerships are read and buckets taken. The
-- delete waits for a renewal of the same member under way (heartbeat.sql
-- locks the row) and re-checks the row as that renewal left it: a member
-- that renewed in time is not deleted, and one that was deleted finds no
-- row to renew, so it knows its buckets may be taken.
DELETE FROM {{ .MemberTable }} AS m
WHERE m.expires_at <= clock_timestamp()
