// Package postgres is the PostgreSQL dialect of queuebox, on pgx/v5.
//
// Its SQL lives in embedded files under sql/, one per query name of
// dialect.QueryNames, rendered once by New with the table and column names
// of a dialect.Mapping. Names go in through one quoting function ("x",
// embedded quotes doubled); stored state values go in as quoted literals
// rather than bind parameters, so that the planner can match the partial
// indexes of the bundled table with every plan, generic or custom.
//
// # The claim
//
// Claim is one statement: a CTE that selects ready rows in (sequence, id)
// order with LIMIT and FOR UPDATE SKIP LOCKED on the base table, and an
// UPDATE ... FROM that CTE which moves them to processing and returns them.
// A row is ready when it is pending, due (scheduled_at <= now()) and the head
// of its key: no pending or processing row of the same non-empty key comes
// before it. Rows with a null or empty key are not ordered.
//
// Three traps are avoided on purpose:
//
//   - Heads are computed from row states, never from locks: the head of a key
//     that another claimer has locked is skipped, and the key's next row is
//     not a head, so it is not claimable either. Every claimer orders by
//     (sequence, id), a total order, so all agree on the heads.
//   - Under READ COMMITTED, PostgreSQL re-evaluates only the locking
//     statement's own predicate against the newest version of a row that
//     changed after the snapshot. The full readiness condition is therefore
//     in the locking SELECT: a row that another claimer claimed and
//     committed in between is pending no more and is dropped. The UPDATE
//     repeats the state and due time, and the head-of-key probe only when
//     the id may not be unique (WithUniqueID; claim.sql says why).
//   - FOR UPDATE is on the base table (FOR UPDATE OF c), not on a derived
//     table, so it locks rows.
//
// Every later write (Renew, Complete, Retry, Dead) is fenced on id, state
// processing, the claim token and an unexpired lease, all on the database
// clock; Release needs no unexpired lease, ReleaseExpired picks rows whose
// lease has expired. Each is one statement for the whole batch: the
// per-row values of Retry and Dead travel as arrays and are unnested.
//
// See docs/claim.md for the index set and measured plans.
package postgres
