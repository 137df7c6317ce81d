package sqlserver

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/microsoft/go-mssqldb" // driver "sqlserver"

	"github.com/queuebox/queuebox/dialect"
)

func parseDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

// unreachableURL points at a port nothing listens on, with a short dial
// timeout.
const unreachableURL = "sqlserver://queuebox:secret-password@127.0.0.1:1?database=outbox&dial+timeout=2&connection+timeout=3"

func unreachableDialect(t *testing.T) *Dialect {
	t.Helper()
	db, err := sql.Open(DriverName, unreachableURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	d, err := New(db, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSQLServerUnreachableFailsFast: New does not connect; Ping against an
// address where nothing listens fails within seconds, names the host, and
// does not leak the password.
func TestSQLServerUnreachableFailsFast(t *testing.T) {
	d := unreachableDialect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := d.Ping(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("ping of 127.0.0.1:1 succeeded")
	}
	t.Logf("ping failed after %v: %v", took.Round(time.Millisecond), err)
	if took > 10*time.Second {
		t.Errorf("ping took %v, want a fast failure", took)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error does not name the host: %v", err)
	}
	if strings.Contains(err.Error(), "secret-password") {
		t.Errorf("error leaks the password: %v", err)
	}
	// And the delivery path fails the same way, classified retryable.
	_, err = d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-000000000001", Limit: 10, Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("claim against an unreachable server: %v", err)
	}
}
