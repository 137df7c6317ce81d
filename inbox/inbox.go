// Package inbox deduplicates messages on the consumer side: a table of the
// message ids each consumer group has applied, and one call, Record, that
// inserts the id inside the consumer's own transaction and reports whether
// it was new. The business effect and the dedup record commit together, so
// a message delivered twice (the relay delivers at least once) is applied
// once:
//
//	tx, _ := pool.Begin(ctx)
//	isNew, err := ib.RecordPgx(ctx, tx, "billing", msgID)
//	if isNew { /* apply the effect on tx */ }
//	tx.Commit(ctx) // then ack the message
//
// A rolled-back transaction forgets the id, so the redelivery is applied.
//
// FromHTTP reads the id of an HTTP delivery, and ContextFromHTTP its trace
// context (the traceparent of the relay's span), so that the consumer's
// span continues the producer's trace; the helpers for the broker
// clients live in subpackages (natsinbox, kafkainbox, amqpinbox) so that a
// consumer links only the client library it uses.
//
// The receiving service's side lives here too (docs/inbox.md): Table
// stores received messages in the inbox table with one INSERT ... ON
// CONFLICT DO NOTHING each (queuebox run's HTTP ingest and broker sources
// use it), and Worker hands the rows of a pull source to the application's
// Handler inside the transaction that marks them processed.
package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"go.opentelemetry.io/otel/propagation"
)

// Dialect is the database of the inbox table.
type Dialect string

// The supported dialects, named as in the configuration's database.type.
const (
	PostgreSQL Dialect = "postgresql"
	SQLServer  Dialect = "sqlserver"
)

// DefaultTable is the table the bundled migrations create.
const DefaultTable = "queuebox_inbox"

// VersionTable is goose's version table for the inbox migrations, apart
// from the outbox's so that both can live in one schema.
const VersionTable = "queuebox_inbox_version"

// MaxLen is the longest consumer group or message id, in characters.
const MaxLen = 255

// ErrInvalid is wrapped by the errors of Record for an empty or too long
// group or message id.
var ErrInvalid = errors.New("inbox: invalid argument")

//go:embed migrations/postgresql/*.sql migrations/sqlserver/*.sql
var migrationFiles embed.FS

// Migrations returns the inbox migrations of d as an fs.FS with the .sql
// files at its root (for goose, or to read them).
func Migrations(d Dialect) (fs.FS, error) {
	if d != PostgreSQL && d != SQLServer {
		return nil, fmt.Errorf("inbox: unknown dialect %q (want postgresql or sqlserver)", d)
	}
	return fs.Sub(migrationFiles, "migrations/"+string(d))
}

// Migrate applies the inbox migrations to db, recording them in
// VersionTable. On PostgreSQL the table is created in the first schema of
// the connection's search_path.
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	fsys, err := Migrations(d)
	if err != nil {
		return err
	}
	gd := goose.DialectPostgres
	if d == SQLServer {
		gd = goose.DialectMSSQL
	}
	p, err := goose.NewProvider(gd, db, fsys, goose.WithTableName(VersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("inbox: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return nil
}

// Option configures an Inbox.
type Option func(*Inbox)

// WithDialect selects the database: PostgreSQL (the default) or SQLServer.
func WithDialect(d Dialect) Option { return func(i *Inbox) { i.dialect = d } }

// WithTable uses another table (table or schema.table) with the columns of
// the bundled one.
func WithTable(table string) Option { return func(i *Inbox) { i.table = table } }

// Inbox records processed message ids. It holds no connection and is safe
// for concurrent use.
type Inbox struct {
	dialect Dialect
	table   string
	record  string
	purge   string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// New returns an Inbox for the bundled table on PostgreSQL unless options
// say otherwise.
func New(opts ...Option) (*Inbox, error) {
	i := &Inbox{dialect: PostgreSQL, table: DefaultTable}
	for _, opt := range opts {
		opt(i)
	}
	parts := strings.Split(i.table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("inbox: table %q: want table or schema.table", i.table)
	}
	quote := func(s string) string { return `"` + s + `"` }
	if i.dialect == SQLServer {
		quote = func(s string) string { return "[" + s + "]" }
	} else if i.dialect != PostgreSQL {
		return nil, fmt.Errorf("inbox: unknown dialect %q (want postgresql or sqlserver)", i.dialect)
	}
	for k, p := range parts {
		if !identRE.MatchString(p) || len(p) > 63 {
			return nil, fmt.Errorf("inbox: table %q: %q is not a plain identifier", i.table, p)
		}
		parts[k] = quote(p)
	}
	t := strings.Join(parts, ".")
	switch i.dialect {
	case PostgreSQL:
		i.record = `INSERT INTO ` + t + ` (consumer_group, message_id) VALUES ($1, $2) ON CONFLICT (consumer_group, message_id) DO NOTHING`
		i.purge = `DELETE FROM ` + t + ` WHERE (consumer_group, message_id) IN (
    SELECT consumer_group, message_id FROM ` + t + `
    WHERE consumer_group = $1 AND processed_at < now() - $2 * interval '1 microsecond'
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED)`
	case SQLServer:
		// UPDLOCK + HOLDLOCK make the existence check take a key-range lock
		// held to the end of the transaction: a concurrent Record of the
		// same id waits for this transaction, then sees its row (commit)
		// or inserts (rollback). The duplicate-key errors 2627/2601 are
		// still mapped to "not new" in case the table is written outside
		// Record.
		i.record = `INSERT INTO ` + t + ` (consumer_group, message_id)
SELECT @p1, @p2
WHERE NOT EXISTS (
    SELECT 1 FROM ` + t + ` WITH (UPDLOCK, HOLDLOCK)
    WHERE consumer_group = @p1 AND message_id = @p2)`
		i.purge = `DELETE TOP (@p3) FROM ` + t + `
WHERE consumer_group = @p1
  AND processed_at < DATEADD(second, -@p2, SYSUTCDATETIME())`
	}
	return i, nil
}

// Dialect returns the inbox's database.
func (i *Inbox) Dialect() Dialect { return i.dialect }

// Statements returns the SQL of Record and Purge, for reading and tests.
func (i *Inbox) Statements() (record, purge string) { return i.record, i.purge }

func check(group, messageID string) error {
	for _, f := range []struct{ name, v string }{{"consumer group", group}, {"message id", messageID}} {
		switch {
		case f.v == "":
			return fmt.Errorf("%w: empty %s", ErrInvalid, f.name)
		case !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0):
			return fmt.Errorf("%w: %s is not valid text", ErrInvalid, f.name)
		case utf8.RuneCountInString(f.v) > MaxLen:
			return fmt.Errorf("%w: %s is longer than %d characters", ErrInvalid, f.name, MaxLen)
		}
	}
	return nil
}

// RecordPgx records messageID as processed by group in tx (PostgreSQL
// through pgx) and reports whether it was new: true means apply the
// message's effect in the same tx; false means the group already applied
// it (in a committed transaction, or in one still open that this call
// waited for).
func (i *Inbox) RecordPgx(ctx context.Context, tx pgx.Tx, group, messageID string) (bool, error) {
	if i.dialect != PostgreSQL {
		return false, fmt.Errorf("inbox: RecordPgx needs the postgresql dialect, the inbox is %s", i.dialect)
	}
	if err := check(group, messageID); err != nil {
		return false, err
	}
	if tx == nil {
		return false, errors.New("inbox: nil transaction")
	}
	tag, err := tx.Exec(ctx, i.record, group, messageID)
	if err != nil {
		return false, fmt.Errorf("inbox: record: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// RecordSQL is RecordPgx for a database/sql transaction (PostgreSQL or SQL
// Server).
func (i *Inbox) RecordSQL(ctx context.Context, tx *sql.Tx, group, messageID string) (bool, error) {
	if err := check(group, messageID); err != nil {
		return false, err
	}
	if tx == nil {
		return false, errors.New("inbox: nil transaction")
	}
	res, err := tx.ExecContext(ctx, i.record, group, messageID)
	if err != nil {
		if i.dialect == SQLServer && duplicateKey(err) {
			return false, nil
		}
		return false, fmt.Errorf("inbox: record: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record: %w", err)
	}
	return n == 1, nil
}

// duplicateKey reports a SQL Server unique violation (2627 primary key or
// unique constraint, 2601 unique index), by error number through
// go-mssqldb's SQLErrorNumber method, without importing the driver.
func duplicateKey(err error) bool {
	var numbered interface{ SQLErrorNumber() int32 }
	if errors.As(err, &numbered) {
		n := numbered.SQLErrorNumber()
		return n == 2627 || n == 2601
	}
	return false
}

// Purge deletes group's ids processed more than olderThan ago, batch rows
// per statement (each its own transaction), until none is left, and
// returns how many it deleted. Keep olderThan well above the longest time a
// message can be redelivered (the relay's retries and any replay window):
// an id purged before its last redelivery is applied again.
func (i *Inbox) Purge(ctx context.Context, db *sql.DB, group string, olderThan time.Duration, batch int) (int64, error) {
	if group == "" {
		return 0, fmt.Errorf("%w: empty consumer group", ErrInvalid)
	}
	if olderThan < 0 || batch <= 0 {
		return 0, fmt.Errorf("%w: purge needs olderThan >= 0 and batch > 0", ErrInvalid)
	}
	age := any(olderThan.Microseconds())
	if i.dialect == SQLServer {
		age = int64(olderThan / time.Second)
	}
	var total int64
	for {
		res, err := db.ExecContext(ctx, i.purge, group, age, batch)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Header names that carry the message identity over HTTP.
const (
	HeaderMessageID      = "X-Message-Id"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// FromHTTP returns the message id of an HTTP delivery: the X-Message-Id
// header, else Idempotency-Key.
func FromHTTP(r *http.Request) (string, bool) {
	if r == nil {
		return "", false
	}
	for _, h := range []string{HeaderMessageID, HeaderIdempotencyKey} {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			return v, true
		}
	}
	return "", false
}

// ContextFromHTTP returns ctx carrying the W3C trace context of an HTTP
// delivery (its traceparent and tracestate headers) as the remote parent:
// a span the consumer starts from it is a child of the relay's span.
// Without a valid traceparent, ctx is returned as it is.
func ContextFromHTTP(ctx context.Context, r *http.Request) context.Context {
	if r == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
