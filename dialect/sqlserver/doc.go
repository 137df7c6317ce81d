// Package sqlserver is the SQL Server dialect of queuebox (SQL Server 2019,
// 2022 and Azure SQL Database), on github.com/microsoft/go-mssqldb through
// database/sql (driver name "sqlserver").
//
// Its SQL lives in embedded files under sql/, one per query name of
// dialect.QueryNames — the same names as the PostgreSQL dialect — rendered
// once by New with the table and column names of a dialect.Mapping. Names go
// in through one quoting function ([x], embedded ] doubled); stored state
// values go in as N'...' literals rather than parameters, so that the
// optimizer can match the filtered indexes of the bundled table.
//
// # The claim
//
// Claim is one UPDATE through a CTE: the CTE selects TOP (@limit) ready rows
// in (sequence, id) order from the base table WITH (UPDLOCK, READPAST,
// ROWLOCK), the UPDATE moves them to processing under a fresh token and
// lease, and OUTPUT returns them. A row is ready when it is pending, due
// (scheduled_at <= SYSUTCDATETIME()) and the head of its key.
//
//   - The update lock is taken as each row is read, so the readiness
//     predicate is evaluated on the current, locked row: there is no window
//     like PostgreSQL's lock wait followed by EvalPlanQual. The condition is
//     still repeated in the UPDATE.
//   - READPAST is on the candidate scan only. The head-of-key probe has no
//     hint: it must see the locked head of a key, not skip it, or the key's
//     next row would look like a head.
//   - Under READ_COMMITTED_SNAPSHOT ON (recommended; the default on Azure
//     SQL) the probe reads committed versions without locks and the claim
//     never waits. Under locking READ COMMITTED the probe may wait for a
//     row that another transaction is writing, and concurrent claimers can
//     deadlock; Claim retries a deadlock victim (error 1205) up to three
//     times with a short jittered pause and counts it (DeadlockRetries).
//
// Every later write (Renew, Complete, Retry, Dead) is fenced on id, state
// processing, the claim token and an unexpired lease, all on the database
// clock; Release needs no unexpired lease, ReleaseExpired picks rows whose
// lease has expired. Ids and per-row values travel as one JSON parameter
// read with OPENJSON (database compatibility level 130 or higher), which
// avoids SQL Server's 2,100-parameter limit.
//
// # The operator surface
//
// Dialect implements dialect.Inspector (Stats, DeadList, Replay) and
// dialect.Purger with the PostgreSQL dialect's query names. Without regular
// expressions, a topic pattern (address.Pattern) becomes a LIKE superset in SQL and the
// exact match (address.Pattern.Match) is made in Go, over keyset-paged reads;
// replay and purge move or delete one TOP (@n) batch per short statement.
// Hold (relay.onDead: hold) is PostgreSQL-only: stats_held_keys and
// dead_release exist for parity but select nothing, and Dialect is not a
// dialect.KeyReleaser.
//
// See docs/sqlserver.md for the reasoning, the index set and what has been
// run against a real server.
package sqlserver
