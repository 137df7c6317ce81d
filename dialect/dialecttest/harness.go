// Package dialecttest is the conformance suite every dialect must pass. A
// dialect's tests call Run with a function that builds a Harness on a fresh,
// empty outbox table of their own database.
package dialecttest

import (
	"context"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// Harness gives the suite one fresh, empty outbox table, the Dialect under
// test bound to it, and the few raw operations the suite needs that the
// Dialect interface does not offer. Every method works on that table only.
// It is small on purpose so that SQL Server can implement it as easily as
// PostgreSQL.
type Harness interface {
	// Dialect is the dialect under test, bound to the harness's table.
	Dialect() dialect.Dialect
	// Insert inserts rows in order, each in its own statement but all
	// committed when Insert returns, so that sequence follows the slice
	// order. It returns the new ids in the same order.
	Insert(ctx context.Context, rows ...Row) ([]string, error)
	// Begin opens a transaction for inserts that commit only when asked.
	Begin(ctx context.Context) (Writer, error)
	// Row reads one row.
	Row(ctx context.Context, id string) (RowState, error)
	// Now is the database clock.
	Now(ctx context.Context) (time.Time, error)
	// ExpireLease sets the row's lease expiry into the past, as if its
	// owner had stopped renewing long ago.
	ExpireLease(ctx context.Context, id string) error
}

// Writer is an open transaction that inserts rows.
type Writer interface {
	Insert(ctx context.Context, r Row) (id string, err error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Row is what the suite inserts. Zero fields take the table's defaults.
type Row struct {
	Topic       string        // "" means "test.topic"
	Key         string        // "" is stored as NULL unless EmptyKey
	EmptyKey    bool          // store the key as '' instead of NULL
	Payload     string        // JSON text; "" means {}
	Headers     string        // JSON text stored as is (may be malformed); "" means the default
	MaxAttempts int           // 0 means the column default
	Delay       time.Duration // scheduled_at = database now + Delay
}

// RowState is a row as stored, read back by the harness. State is the
// logical state (the harness translates a state mapping).
type RowState struct {
	State          outbox.State
	Attempt        int
	MaxAttempts    int
	LastError      *string
	ScheduledAt    time.Time
	ClaimToken     string // "" when NULL
	LeaseExpiresAt *time.Time
	Sequence       int64
}
