-- stats_held_keys: keys held by a dead row (relay.onDead: hold). Hold is
-- PostgreSQL-only for now: the SQL Server table has no held_at column and
-- this dialect never holds a key, so nothing is ever held. The statement is
-- defined so that both dialects have the same query set; it returns no rows
-- without reading the table, and Stats does not run it.
SELECT CAST(NULL AS NVARCHAR(255)) AS held_key,
       CAST(NULL AS NVARCHAR(36))  AS dead_id,
       CAST(0 AS BIGINT)           AS waiting
WHERE 1 = 0 AND @n IS NULL;
