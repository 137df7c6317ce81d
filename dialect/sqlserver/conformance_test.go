package sqlserver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/dialecttest"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/outbox"
)

// TestSQLServerConformance runs the dialect conformance suite against a real
// SQL Server: QUEUEBOX_TEST_SQLSERVER_URL (a sqlserver:// URL of a login that
// may CREATE DATABASE), or a container started by testcontainers where a
// Docker engine answers. Each subtest gets a database of its own with
// READ_COMMITTED_SNAPSHOT ON and the bundled migrations applied; it is
// dropped when the subtest ends. With no server the test skips with one
// line; QUEUEBOX_REQUIRE_SQLSERVER=1 makes that a failure.
// (QUEUEBOX_REQUIRE_SERVICES does not: SQL Server is not one of the
// services every CI machine runs.)
func TestSQLServerConformance(t *testing.T) {
	base := sqlServerURL(t)
	dialecttest.Run(t, func(t *testing.T) dialecttest.Harness {
		db := testDatabase(t, base)
		d, err := New(db, dialect.DefaultMapping())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := d.DatabaseSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if errs, warns := s.Problems(); len(errs)+len(warns) > 0 {
			t.Fatalf("test database settings: %v %v", errs, warns)
		}
		return &harness{db: db, d: d}
	})
}

func sqlServerRequired() bool { return os.Getenv("QUEUEBOX_REQUIRE_SQLSERVER") == "1" }

// sqlServerURL returns the server URL for the tests or skips t (fails it
// under QUEUEBOX_REQUIRE_SQLSERVER=1).
func sqlServerURL(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if sqlServerRequired() {
			t.Fatalf("SQL Server is required (QUEUEBOX_REQUIRE_SQLSERVER=1): %s", msg)
		}
		t.Skipf("skipping: %s; set QUEUEBOX_REQUIRE_SQLSERVER=1 to fail instead", msg)
	}
	base := os.Getenv("QUEUEBOX_TEST_SQLSERVER_URL")
	source := "QUEUEBOX_TEST_SQLSERVER_URL"
	if base == "" {
		var err error
		base, err = containerURL()
		if err != nil {
			unavailable("no SQL Server (QUEUEBOX_TEST_SQLSERVER_URL unset, and no container: %v)", err)
		}
		source = "a testcontainers SQL Server"
	}
	if _, err := url.Parse(base); err != nil {
		t.Fatalf("%s is not a sqlserver:// URL: %v", source, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open(DriverName, base)
	if err == nil {
		err = db.PingContext(ctx)
		_ = db.Close()
	}
	if err != nil {
		unavailable("SQL Server from %s unreachable: %v", source, err)
	}
	return base
}

// testDatabase creates a database of the test's own on the server at base,
// with READ_COMMITTED_SNAPSHOT ON (see docs/sqlserver.md) and the bundled
// migrations applied, and drops it when the test ends.
func testDatabase(t *testing.T, base string) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := sql.Open(DriverName, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "qb_" + hex.EncodeToString(b)
	for _, stmt := range []string{
		"CREATE DATABASE " + QuoteIdent(name),
		"ALTER DATABASE " + QuoteIdent(name) + " SET READ_COMMITTED_SNAPSHOT ON",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("testenv: %s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		admin, err := sql.Open(DriverName, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "ALTER DATABASE "+QuoteIdent(name)+" SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE "+QuoteIdent(name)); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})

	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("database", name)
	u.RawQuery = q.Encode()
	db, err := sql.Open(DriverName, u.String())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { _ = db.Close() }) // runs before the database is dropped
	provider, err := migrations.NewProvider("sqlserver", db)
	if err == nil {
		_, err = provider.Up(ctx)
	}
	if err != nil {
		t.Fatalf("migrate database %s: %v", name, err)
	}
	return db
}

// harness implements dialecttest.Harness on the bundled table in the test's
// own database.
type harness struct {
	db *sql.DB
	d  *Dialect
}

func (h *harness) Dialect() dialect.Dialect { return h.d }

const insertSQL = `INSERT INTO outbox (topic, [key], payload, headers, max_attempts, scheduled_at)
OUTPUT LOWER(CONVERT(NVARCHAR(36), inserted.id))
VALUES (@topic, @key, @payload, COALESCE(@headers, N'{}'), COALESCE(@max_attempts, 5),
        DATEADD(millisecond, CONVERT(INT, @delay_ms), SYSUTCDATETIME()))`

func insertArgs(r dialecttest.Row) []any {
	topic := r.Topic
	if topic == "" {
		topic = "test.topic"
	}
	key := sql.NullString{String: r.Key, Valid: r.Key != "" || r.EmptyKey}
	headers := sql.NullString{String: r.Headers, Valid: r.Headers != ""}
	payload := r.Payload
	if payload == "" {
		payload = "{}"
	}
	maxAttempts := sql.NullInt32{Int32: int32(r.MaxAttempts), Valid: r.MaxAttempts != 0}
	return []any{
		sql.Named("topic", topic), sql.Named("key", key), sql.Named("payload", payload),
		sql.Named("headers", headers), sql.Named("max_attempts", maxAttempts),
		sql.Named("delay_ms", int32(r.Delay.Milliseconds())),
	}
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func insertRow(ctx context.Context, q queryer, r dialecttest.Row) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, insertSQL, insertArgs(r)...).Scan(&id)
	return id, err
}

func (h *harness) Insert(ctx context.Context, rows ...dialecttest.Row) ([]string, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	ids := make([]string, len(rows))
	for i, r := range rows {
		if ids[i], err = insertRow(ctx, tx, r); err != nil {
			return nil, err
		}
	}
	return ids, tx.Commit()
}

type writer struct{ tx *sql.Tx }

func (h *harness) Begin(ctx context.Context) (dialecttest.Writer, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &writer{tx: tx}, nil
}

func (w *writer) Insert(ctx context.Context, r dialecttest.Row) (string, error) {
	return insertRow(ctx, w.tx, r)
}
func (w *writer) Commit(context.Context) error   { return w.tx.Commit() }
func (w *writer) Rollback(context.Context) error { return w.tx.Rollback() }

func (h *harness) Row(ctx context.Context, id string) (dialecttest.RowState, error) {
	var (
		r         dialecttest.RowState
		state     string
		token     sql.NullString
		lastError sql.NullString
		lease     sql.NullTime
	)
	err := h.db.QueryRowContext(ctx, `SELECT state, attempt, max_attempts, last_error, scheduled_at,
		LOWER(CONVERT(NVARCHAR(36), claim_token)), lease_expires_at, sequence FROM outbox WHERE id = @id`, sql.Named("id", id)).
		Scan(&state, &r.Attempt, &r.MaxAttempts, &lastError, &r.ScheduledAt, &token, &lease, &r.Sequence)
	r.State = outbox.State(state)
	r.ClaimToken = token.String
	if lastError.Valid {
		r.LastError = &lastError.String
	}
	if lease.Valid {
		t := lease.Time.UTC()
		r.LeaseExpiresAt = &t
	}
	r.ScheduledAt = r.ScheduledAt.UTC()
	return r, err
}

func (h *harness) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := h.db.QueryRowContext(ctx, `SELECT SYSUTCDATETIME()`).Scan(&now)
	return now.UTC(), err
}

func (h *harness) ExpireLease(ctx context.Context, id string) error {
	res, err := h.db.ExecContext(ctx, `UPDATE outbox SET lease_expires_at = DATEADD(second, -1, SYSUTCDATETIME()) WHERE id = @id`, sql.Named("id", id))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("expire lease: no row %s (%v)", id, err)
	}
	return nil
}

// The operator tests of dialecttest (stats, dead list, replay, purge) run
// through the same TestSQLServerConformance: they need the dialect to be a
// dialect.Inspector and dialect.Purger, and the harness to be an Ager (for
// the retention test). Hold is PostgreSQL-only, so the harness is no
// HoldHarness and the two held-key tests skip.
var (
	_ dialecttest.Ager  = (*harness)(nil)
	_ dialect.Inspector = (*Dialect)(nil)
	_ dialect.Purger    = (*Dialect)(nil)
)

// Age moves the row's created_at, scheduled_at and updated_at back by by
// (whole seconds; DATEADD takes an INT).
func (h *harness) Age(ctx context.Context, id string, by time.Duration) error {
	res, err := h.db.ExecContext(ctx, `UPDATE outbox
SET created_at = DATEADD(second, -@s, created_at),
    scheduled_at = DATEADD(second, -@s, scheduled_at),
    updated_at = DATEADD(second, -@s, updated_at)
WHERE id = @id`, sql.Named("s", int32(by/time.Second)), sql.Named("id", id))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("age: no row %s (%v)", id, err)
	}
	return nil
}
