package inbox

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/sqlname"
)

// MessagesTable is the table the inbox migrations create (package
// migrations, InboxFS): the receiving service's messages, as opposed to
// DefaultTable, the consumer-side ledger of Record.
const MessagesTable = "inbox"

// The logical columns the inbox table has beyond the outbox's.
const (
	ColSource         = "source"
	ColIdempotencyKey = "idempotencyKey"
)

var inboxColumns = map[string]string{ColSource: "source", ColIdempotencyKey: "idempotency_key"}

// DefaultMaxAttempts is the attempts a received row gets when the caller
// names none.
const DefaultMaxAttempts = 5

//go:embed sql/postgresql/*.sql
var sqlFiles embed.FS

// Row is one received message.
type Row struct {
	Source         string
	IdempotencyKey string
	Topic          string
	Key            string // order key; "" for none
	Payload        []byte // a JSON document
	Headers        map[string]string
	// Pull stores the row pending for an inbox.Worker; otherwise it is
	// handed on: stored sent and written to the outbox, in one statement.
	Pull        bool
	MaxAttempts int // 0: DefaultMaxAttempts
}

// Receipt is what Receive did: the message id, and whether the source had
// already received the idempotency key (then ID is the first message's).
type Receipt struct {
	ID        string
	Duplicate bool
}

// Receiver stores received messages; *Table is one.
type Receiver interface {
	Receive(ctx context.Context, r Row) (Receipt, error)
}

// ErrRejected is wrapped by Receive's errors for a row the database
// refused as it is (a payload PostgreSQL cannot store, a value too long):
// sending it again cannot succeed.
var ErrRejected = errors.New("inbox: message refused by the database")

// TableOptions say where the inbox table and the outbox are.
type TableOptions struct {
	Table   string            // default MessagesTable; may be schema.table
	Columns map[string]string // logical -> physical, as database.columns
	// Outbox is where messages of push sources go; the zero Mapping is
	// the bundled outbox table.
	Outbox dialect.Mapping
}

// Table is the inbox table on PostgreSQL. It is safe for concurrent use.
type Table struct {
	pool    *pgxpool.Pool
	mapping Mapping
	receive string
	push    string
	lookup  string
	// receiveBatch stores several receives at once (Batch).
	receiveBatch string
	batch        *batcher
}

// Mapping is the inbox table's layout: the outbox mapping of its shared
// columns plus the physical names of source and idempotencyKey.
type Mapping struct {
	dialect.Mapping
	extra map[string]string
}

// NewMapping builds the inbox table's mapping from a table name and a
// logical -> physical column map (source and idempotencyKey beside the
// outbox's logical names). The table has no aggregateType column.
func NewMapping(table string, columns map[string]string) (Mapping, error) {
	if table == "" {
		table = MessagesTable
	}
	shared := map[string]string{dialect.ColAggregateType: ""}
	extra := map[string]string{}
	for k, v := range inboxColumns {
		extra[k] = v
	}
	for k, v := range columns {
		if _, ok := inboxColumns[k]; ok {
			if !identRE.MatchString(v) {
				return Mapping{}, fmt.Errorf("columns.%s: %q is not a plain identifier", k, v)
			}
			extra[k] = v
			continue
		}
		shared[k] = v
	}
	m, err := dialect.NewMapping(table, shared, nil)
	if err != nil {
		return Mapping{}, err
	}
	return Mapping{Mapping: m, extra: extra}, nil
}

// Column is the physical name of a logical column of the inbox table.
func (m Mapping) Column(logical string) (string, bool) {
	if c, ok := m.extra[logical]; ok {
		return c, true
	}
	return m.Mapping.Column(logical)
}

// NewTable renders the inbox statements for pool's database.
func NewTable(pool *pgxpool.Pool, o TableOptions) (*Table, error) {
	if pool == nil {
		return nil, errors.New("inbox: nil pool")
	}
	m, err := NewMapping(o.Table, o.Columns)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	out := o.Outbox
	if out.TableName() == "" {
		out = dialect.DefaultMapping()
	}
	q, err := renderSQL(m, out, "receive", "receive_push", "receive_batch", "lookup")
	if err != nil {
		return nil, err
	}
	return &Table{pool: pool, mapping: m, receive: q["receive"], push: q["receive_push"], receiveBatch: q["receive_batch"], lookup: q["lookup"]}, nil
}

// Mapping is the table's layout.
func (t *Table) Mapping() Mapping { return t.mapping }

// Statements returns the receive statements (pull, push, batch), for
// reading and for checking them at start.
func (t *Table) Statements() []string { return []string{t.receive, t.push, t.receiveBatch} }

// Receive stores r with one INSERT ... ON CONFLICT DO NOTHING (for a push
// source, one statement that also writes the outbox row) and reports
// whether it was new. It returns after the commit: a Receipt means the
// message is durable.
func (t *Table) Receive(ctx context.Context, r Row) (Receipt, error) {
	if t.batch != nil {
		return t.batch.receive(ctx, r)
	}
	return t.receiveOne(ctx, r)
}

func (t *Table) receiveOne(ctx context.Context, r Row) (Receipt, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Receipt{}, err
	}
	headers, err := encodeHeaders(r.Headers)
	if err != nil {
		return Receipt{}, err
	}
	var key any
	if r.Key != "" {
		key = r.Key
	}
	stmt := t.push
	if r.Pull {
		stmt = t.receive
	}
	tag, err := t.pool.Exec(ctx, stmt, id.String(), r.Source, r.IdempotencyKey, r.Topic, key, string(r.Payload), headers, maxAttempts(r))
	if err != nil {
		return Receipt{}, classify(err)
	}
	if tag.RowsAffected() == 1 {
		return Receipt{ID: id.String()}, nil
	}
	return t.duplicate(ctx, r), nil
}

// duplicate is the receipt of a repeated idempotency key, with the first
// message's id when it can be read.
func (t *Table) duplicate(ctx context.Context, r Row) Receipt {
	var first string
	if err := t.pool.QueryRow(context.WithoutCancel(ctx), t.lookup, r.Source, r.IdempotencyKey).Scan(&first); err != nil {
		return Receipt{Duplicate: true}
	}
	return Receipt{ID: first, Duplicate: true}
}

// classify marks the errors of a row the database refuses (data
// exceptions, class 22) as ErrRejected.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return fmt.Errorf("%w: %s", ErrRejected, pgErr.Message)
	}
	return fmt.Errorf("inbox: receive: %w", err)
}

// renderSQL renders the named statements of sql/postgresql for the inbox
// mapping m and the outbox mapping out.
func renderSQL(m Mapping, out dialect.Mapping, names ...string) (map[string]string, error) {
	quote := func(s string) string { return sqlname.Postgres(s) }
	funcs := template.FuncMap{
		"col": func(logical string) (string, error) {
			c, ok := m.Column(logical)
			if !ok {
				return "", fmt.Errorf("inbox table: column %s is not mapped", logical)
			}
			return quote(c), nil
		},
		"state": func(s string) string { return sqlname.Literal(m.State(outbox.State(s))) },
		"ocol": func(logical string) (string, error) {
			c, ok := out.Column(logical)
			if !ok {
				return "", fmt.Errorf("outbox: column %s is not mapped", logical)
			}
			return quote(c), nil
		},
		"ohas": out.Has,
	}
	data := map[string]string{"Table": m.Table(quote), "Outbox": out.Table(quote)}
	res := map[string]string{}
	for _, n := range names {
		src, err := sqlFiles.ReadFile("sql/postgresql/" + n + ".sql")
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(n).Funcs(funcs).Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("inbox: %s.sql: %w", n, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("inbox: %s.sql: %w", n, err)
		}
		res[n] = b.String()
	}
	return res, nil
}

var _ Receiver = (*Table)(nil)
