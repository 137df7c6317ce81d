-- buckets lock: serialize the changes of ownership of the table's buckets
-- (acquire), in the transaction that makes them, so that each acquisition
-- reads the ownerships and memberships the last one committed.
SELECT pg_advisory_xact_lock({{ bucketLockSpace }}::bigint << 32 | {{ literal .Table }}::regclass::oid::bigint)
