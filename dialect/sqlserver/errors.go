package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/queuebox/queuebox/outbox"
)

// errorClass is what an error means to the relay.
type errorClass int

const (
	classUnknown   errorClass = iota // retryable by the outbox default
	classRetryable                   // a later attempt can get past it
	classPermanent                   // no retry can fix it
)

// retryableNumbers are SQL Server error numbers that a later attempt can get
// past: deadlocks and lock timeouts, resource shortages, and the transient
// connection and failover errors of SQL Server and Azure SQL Database.
var retryableNumbers = map[int32]string{
	1205:  "deadlock victim",
	1222:  "lock request timeout",
	1204:  "out of lock resources",
	3960:  "snapshot update conflict",
	3966:  "snapshot transaction aborted",
	701:   "insufficient memory",
	8645:  "timeout waiting for memory",
	8651:  "low memory",
	9002:  "transaction log full",
	233:   "connection closed by the server",
	64:    "network name no longer available",
	10053: "connection aborted",
	10054: "connection reset by peer",
	10060: "connection timed out",
	10928: "resource limit reached (Azure SQL)",
	10929: "resource limit reached (Azure SQL)",
	4060:  "cannot open database (failover or restart)",
	4221:  "login timed out waiting for a readable secondary",
	40143: "connection aborted (Azure SQL)",
	40197: "service error processing the request (Azure SQL failover)",
	40501: "service busy (Azure SQL)",
	40540: "service error (Azure SQL)",
	40613: "database unavailable (Azure SQL)",
	49918: "not enough resources (Azure SQL)",
	49919: "too many create or update operations (Azure SQL)",
	49920: "too many operations in progress (Azure SQL)",
	41301: "dependency failure (In-Memory OLTP)",
	41302: "update conflict (In-Memory OLTP)",
	41305: "repeatable read validation failure (In-Memory OLTP)",
	41325: "serializable validation failure (In-Memory OLTP)",
}

// permanentNumbers are SQL Server error numbers that no retry can fix: bad
// data, violated constraints, and statements that cannot run against this
// table (a missing table or column, a missing permission, a database whose
// compatibility level lacks OPENJSON).
var permanentNumbers = map[int32]string{
	2627:  "unique constraint violation",
	2601:  "duplicate key in a unique index",
	547:   "constraint violation (check or foreign key)",
	515:   "NULL into a NOT NULL column",
	245:   "conversion failed",
	8114:  "error converting data type",
	241:   "date/time conversion failed",
	242:   "date/time value out of range",
	8169:  "conversion to uniqueidentifier failed",
	8115:  "arithmetic overflow",
	220:   "arithmetic overflow for data type",
	8152:  "string or binary data would be truncated",
	2628:  "string or binary data would be truncated",
	13609: "JSON text is not properly formatted",
	102:   "syntax error",
	156:   "syntax error near keyword",
	207:   "invalid column name",
	208:   "invalid object name",
	229:   "permission denied",
	230:   "permission denied on column",
	334:   "OUTPUT without INTO on a table with triggers",
	8116:  "argument data type invalid for function",
	195:   "not a recognized built-in function",
	3609:  "the transaction ended in a trigger",
}

// firstUserError is the lowest error number of a user-defined error: THROW
// and RAISERROR in a trigger on an adopted table. Such a trigger refuses
// the change on purpose; no retry can change its mind.
const firstUserError = 50000

// classify is the one place where SQL Server and driver errors are told
// apart, by error number and type, never by message text.
func classify(err error) errorClass {
	if err == nil {
		return classUnknown
	}
	var sqlErr mssql.Error
	if errors.As(err, &sqlErr) {
		// A batch can report several errors; the deadlock or failover that
		// aborted it may not be the last one.
		numbers := []int32{sqlErr.Number}
		for _, e := range sqlErr.All {
			numbers = append(numbers, e.Number)
		}
		for _, n := range numbers {
			if _, ok := retryableNumbers[n]; ok {
				return classRetryable
			}
		}
		for _, n := range numbers {
			if _, ok := permanentNumbers[n]; ok || n >= firstUserError {
				return classPermanent
			}
		}
		var serverErr mssql.ServerError
		if errors.As(err, &serverErr) {
			return classRetryable // fatal server error: the connection is gone
		}
		return classUnknown
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return classRetryable
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return classRetryable
	}
	var streamErr mssql.StreamError
	if errors.As(err, &streamErr) {
		return classRetryable
	}
	return classUnknown
}

// missingObjectHint is the fix for error 208 (invalid object name): the
// table is missing, or the database is too old for OPENJSON; "" for any
// other error.
func missingObjectHint(err error) string {
	var sqlErr mssql.Error
	if !errors.As(err, &sqlErr) || sqlErr.Number != 208 {
		return ""
	}
	return " (the outbox table does not exist or this login cannot see it: create it with queuebox migrate up, or point database.outboxTable at it; " +
		"or, for OPENJSON, the database's compatibility level is below 130)"
}

// isDeadlockVictim reports error 1205 anywhere in the error's chain.
func isDeadlockVictim(err error) bool {
	var sqlErr mssql.Error
	if !errors.As(err, &sqlErr) {
		return false
	}
	if sqlErr.Number == 1205 {
		return true
	}
	for _, e := range sqlErr.All {
		if e.Number == 1205 {
			return true
		}
	}
	return false
}

// maybeApplied reports an error after which the statement may have run all
// the same: not the server's answer (an mssql.Error, unless a fatal one that
// closed the connection), not driver.ErrBadConn, which a driver returns
// only for a request it never sent (database/sql/driver), and not a failed
// dial (database/sql opening a new connection for the statement).
func maybeApplied(err error) bool {
	var serverErr mssql.ServerError
	if errors.As(err, &serverErr) {
		return true
	}
	var sqlErr mssql.Error
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return false // no connection could be opened for it
	}
	return !errors.As(err, &sqlErr) && !errors.Is(err, driver.ErrBadConn)
}

// interpretError wraps err with the query name and marks the errors that no
// retry can fix outbox.Permanent, and those after which the statement may
// have run outbox.MaybeApplied (maybeApplied). Everything else stays retryable (the
// outbox default): deadlocks, lock timeouts, lost connections, failovers and
// errors this classification does not know. Context errors pass through.
func interpretError(query string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("sqlserver: %s: %w%s", query, err, missingObjectHint(err))
	if maybeApplied(err) {
		wrapped = outbox.MaybeApplied(wrapped)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wrapped
	}
	if classify(err) == classPermanent {
		return outbox.Permanent(wrapped)
	}
	return wrapped
}
