package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

func TestSQLServerInterpretError(t *testing.T) {
	num := func(n int32) error { return mssql.Error{Number: n, Message: "x", Class: 16} }
	tests := []struct {
		name string
		err  error
		want errorClass
	}{
		{"deadlock victim 1205", num(1205), classRetryable},
		{"lock timeout 1222", num(1222), classRetryable},
		{"snapshot conflict 3960", num(3960), classRetryable},
		{"cannot open database 4060", num(4060), classRetryable},
		{"azure unavailable 40613", num(40613), classRetryable},
		{"azure failover 40197", num(40197), classRetryable},
		{"azure busy 40501", num(40501), classRetryable},
		{"azure resources 49918", num(49918), classRetryable},
		{"azure resources 49919", num(49919), classRetryable},
		{"azure resources 49920", num(49920), classRetryable},
		{"unique constraint 2627", num(2627), classPermanent},
		{"a trigger's THROW 51000", num(51000), classPermanent},
		{"a trigger's RAISERROR with a message", num(50000), classPermanent},
		{"a trigger's ROLLBACK 3609", num(3609), classPermanent},
		{"unique index 2601", num(2601), classPermanent},
		{"check or foreign key 547", num(547), classPermanent},
		{"conversion 245", num(245), classPermanent},
		{"conversion 8114", num(8114), classPermanent},
		{"date conversion 241", num(241), classPermanent},
		{"uniqueidentifier conversion 8169", num(8169), classPermanent},
		{"truncation 2628", num(2628), classPermanent},
		{"bad JSON 13609", num(13609), classPermanent},
		{"invalid object 208", num(208), classPermanent},
		{"invalid column 207", num(207), classPermanent},
		{"unknown number", num(12345), classUnknown},
		// A batch that reports several errors: the deadlock counts even
		// when it is not the last one, and wins over a permanent one.
		{"deadlock among several", mssql.Error{Number: 3621, All: []mssql.Error{{Number: 1205}, {Number: 3621}}}, classRetryable},
		{"constraint among several", mssql.Error{Number: 3621, All: []mssql.Error{{Number: 2627}, {Number: 3621}}}, classPermanent},
		{"wrapped number", fmt.Errorf("outer: %w", num(1205)), classRetryable},
		{"fatal server error", mssql.ServerError{}, classRetryable},
		{"bad connection", driver.ErrBadConn, classRetryable},
		{"wrapped bad connection", fmt.Errorf("x: %w", driver.ErrBadConn), classRetryable},
		{"connection closed", io.EOF, classRetryable},
		{"net error", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, classRetryable},
		{"stream error", mssql.StreamError{InnerError: errors.New("short read")}, classRetryable},
		{"plain error", errors.New("something"), classUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
			}
			err := interpretError("q", tc.err)
			var want mssql.Error
			if errors.As(tc.err, &want) {
				// mssql.Error holds a slice, so errors.Is cannot compare it.
				var got mssql.Error
				if !errors.As(err, &got) || got.Number != want.Number {
					t.Errorf("interpretError lost the SQL Server error: %v", err)
				}
			} else if !errors.Is(err, tc.err) {
				t.Errorf("interpretError lost the cause: %v", err)
			}
			if tc.want == classPermanent && !outbox.IsPermanent(err) {
				t.Errorf("%v: not permanent", err)
			}
			if tc.want != classPermanent && !outbox.IsRetryable(err) {
				t.Errorf("%v: not retryable", err)
			}
		})
	}
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("x: %w", context.Canceled)} {
		if got := interpretError("q", err); outbox.IsPermanent(got) || !errors.Is(got, err) {
			t.Errorf("context error %v became %v", err, got)
		}
	}
	if interpretError("q", nil) != nil {
		t.Error("nil error not nil")
	}
	if !isDeadlockVictim(fmt.Errorf("w: %w", num(1205))) || isDeadlockVictim(num(1222)) || isDeadlockVictim(io.EOF) {
		t.Error("isDeadlockVictim misclassifies")
	}
}

// TestSQLServerMaybeApplied: an error that is not the server's answer, not
// driver.ErrBadConn (never sent) and not a failed dial may come after the
// statement committed.
func TestSQLServerMaybeApplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"server error", mssql.Error{Number: 1205}, false},
		{"constraint", mssql.Error{Number: 2627}, false},
		{"bad connection, never sent", driver.ErrBadConn, false},
		{"fatal server error", mssql.ServerError{}, true},
		{"connection closed", io.EOF, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"dial refused", fmt.Errorf("unable to open tcp connection with host 'db:1433': %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), false},
	} {
		if got := outbox.IsMaybeApplied(interpretError("q", tc.err)); got != tc.want {
			t.Errorf("%s: maybe applied %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSQLServerBadIDsArePermanent: ids and tokens that are not UUIDs are
// refused before they reach the server (no connection is needed: the pool
// below points nowhere and is never used).
func TestSQLServerBadIDsArePermanent(t *testing.T) {
	d := unreachableDialect(t)
	ctx := context.Background()
	good := "6f1c1a5e-0000-4000-8000-000000000001"
	calls := map[string]func() error{
		"complete bad id": func() error {
			_, err := d.Complete(ctx, dialect.CompleteParams{Token: good, IDs: []string{"not-a-uuid"}})
			return err
		},
		"dead bad id": func() error {
			_, err := d.Dead(ctx, dialect.DeadParams{Token: good, Items: []dialect.DeadItem{{ID: "x'); DROP TABLE outbox; --"}}})
			return err
		},
		"retry bad token": func() error {
			_, err := d.Retry(ctx, dialect.RetryParams{Token: "nope", Items: []dialect.RetryItem{{ID: good}}})
			return err
		},
		"release hex without hyphens": func() error {
			_, err := d.Release(ctx, dialect.ReleaseParams{Token: good, IDs: []string{"6f1c1a5e000040008000000000000001"}})
			return err
		},
		"renew bad token": func() error {
			_, err := d.Renew(ctx, dialect.RenewParams{Token: "", Lease: 1})
			return err
		},
		"claim bad token": func() error {
			_, err := d.Claim(ctx, dialect.ClaimParams{Token: "x", Limit: 1, Lease: 1})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !outbox.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", name, err)
		}
	}
}

func TestSQLServerLeaseBounds(t *testing.T) {
	for _, tc := range []struct {
		lease   string
		wantMS  int32
		wantErr bool
	}{
		{"30s", 30000, false}, {"1ns", 1, false}, {"1500us", 2, false}, {"0s", 0, true}, {"-1s", 0, true}, {"600h", 0, true},
	} {
		d, _ := parseDuration(tc.lease)
		ms, err := leaseMillis("claim", d)
		if (err != nil) != tc.wantErr || ms != tc.wantMS {
			t.Errorf("leaseMillis(%s) = %d, %v; want %d, error %v", tc.lease, ms, err, tc.wantMS, tc.wantErr)
		}
	}
}

func TestSQLServerSettingsProblems(t *testing.T) {
	errs, warns := DatabaseSettings{ReadCommittedSnapshot: true, CompatibilityLevel: 160}.Problems()
	if len(errs)+len(warns) != 0 {
		t.Errorf("good settings: %v %v", errs, warns)
	}
	errs, warns = DatabaseSettings{ReadCommittedSnapshot: false, CompatibilityLevel: 120}.Problems()
	if len(errs) != 1 || len(warns) != 1 {
		t.Errorf("bad settings: errors %v warnings %v", errs, warns)
	}
}

// TestSQLServerMissingTableNamesTheFix: an invalid object name (208), a
// table that does not exist, names queuebox migrate up; other errors get
// no such hint.
func TestSQLServerMissingTableNamesTheFix(t *testing.T) {
	missing := interpretError("stats_counts", mssql.Error{Number: 208, Message: "Invalid object name 'outbox'.", Class: 16})
	if got := missing.Error(); !strings.Contains(got, "queuebox migrate up") || !outbox.IsPermanent(missing) {
		t.Errorf("missing table: %q (permanent %v), want the fix queuebox migrate up", got, outbox.IsPermanent(missing))
	}
	if got := interpretError("stats_counts", mssql.Error{Number: 207, Message: "Invalid column name 'x'.", Class: 16}).Error(); strings.Contains(got, "migrate") {
		t.Errorf("invalid column: %q names migrate", got)
	}
}
