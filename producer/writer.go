package producer

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/sqlname"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Dialect is the database a Writer writes to.
type Dialect string

// The supported dialects, named as in the configuration's database.type.
const (
	PostgreSQL Dialect = "postgresql"
	SQLServer  Dialect = "sqlserver"
)

type options struct {
	dialect    Dialect
	mapping    dialect.Mapping
	mappingSet bool
	mappingErr error
	notify     string
}

// Option configures a Writer.
type Option func(*options)

// WithDialect selects the database: PostgreSQL (the default) or SQLServer.
func WithDialect(d Dialect) Option { return func(o *options) { o.dialect = d } }

// WithMapping writes to the table and columns of m, the mapping the relay
// is configured with (dialect.NewMapping). Default: dialect.DefaultMapping().
func WithMapping(m dialect.Mapping) Option {
	return func(o *options) { o.mapping, o.mappingSet = m, true }
}

// WithTable is WithMapping from the configuration's database.outboxTable,
// database.columns and database.states values.
func WithTable(table string, columns, states map[string]string) Option {
	return func(o *options) {
		o.mapping, o.mappingErr = dialect.NewMapping(table, columns, states)
		o.mappingSet = true
	}
}

// WithNotify makes every Write also run pg_notify(channel, ”) in the same
// transaction, once per Write, so that a relay LISTENing on channel claims
// at once. PostgreSQL delivers the notification when the transaction
// commits (and drops it on rollback), so a relay never wakes for rows it
// cannot see yet. It costs no extra round trip: the notification is part of
// the insert statement. It is sent only while a relay sleeps on the channel
// (docs/producing.md, wake on commit), because a transaction that notifies
// serialises its commit with every other notifying one; otherwise the
// statement takes an advisory lock shared, which makes a relay about to
// sleep wait for this commit and then claim it. PostgreSQL only.
func WithNotify(channel string) Option { return func(o *options) { o.notify = channel } }

// Writer writes messages to the outbox inside a caller's transaction. It
// holds no connection and is safe for concurrent use.
type Writer struct {
	dialect Dialect
	notify  string
	mapping dialect.Mapping
	// stmts[withMaxAttempts]: the insert with or without the max attempts
	// column.
	stmts [2]string
}

// New returns a Writer. It fails on an unknown dialect, an invalid mapping
// or a notify channel on SQL Server.
func New(opts ...Option) (*Writer, error) {
	o := options{dialect: PostgreSQL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mappingErr != nil {
		return nil, fmt.Errorf("producer: %w", o.mappingErr)
	}
	if !o.mappingSet {
		o.mapping = dialect.DefaultMapping()
	}
	if o.mapping.TableName() == "" {
		return nil, errors.New("producer: empty mapping (use dialect.DefaultMapping or dialect.NewMapping)")
	}
	switch o.dialect {
	case PostgreSQL:
		if len(o.notify) > 63 || strings.ContainsRune(o.notify, 0) {
			return nil, fmt.Errorf("producer: notify channel %q is not a PostgreSQL identifier (at most 63 bytes)", o.notify)
		}
	case SQLServer:
		if o.notify != "" {
			return nil, errors.New("producer: WithNotify is PostgreSQL only (SQL Server has no NOTIFY)")
		}
	default:
		return nil, fmt.Errorf("producer: unknown dialect %q (want postgresql or sqlserver)", o.dialect)
	}
	w := &Writer{dialect: o.dialect, notify: o.notify, mapping: o.mapping}
	for i, withMax := range []bool{false, true} {
		if withMax && !o.mapping.Has(dialect.ColMaxAttempts) {
			// No such column: a message that sets MaxAttempts is refused
			// (unstorable), so this statement never runs.
			w.stmts[i] = w.stmts[0]
			continue
		}
		s, err := render(o.dialect, o.mapping, withMax, o.notify != "")
		if err != nil {
			return nil, err
		}
		w.stmts[i] = s
	}
	return w, nil
}

// Dialect returns the writer's database.
func (w *Writer) Dialect() Dialect { return w.dialect }

// Statement returns the INSERT the writer runs, with or without the max
// attempts column. For tests and for reading; the single parameter is the
// JSON array of messages (and on PostgreSQL with WithNotify, the channel).
func (w *Writer) Statement(withMaxAttempts bool) string {
	if withMaxAttempts {
		return w.stmts[1]
	}
	return w.stmts[0]
}

func render(d Dialect, m dialect.Mapping, withMax, notify bool) (string, error) {
	quote := sqlname.Postgres
	stateLit := sqlname.Literal
	if d == SQLServer {
		quote = sqlname.SQLServer
		stateLit = func(s string) string { return "N" + sqlname.Literal(s) }
	} else {
		for _, ident := range append(mapValues(m.Columns()), m.Schema(), m.TableName()) {
			if len(ident) > 63 {
				return "", fmt.Errorf("producer: identifier %q is longer than PostgreSQL's 63 bytes", ident)
			}
		}
	}
	src, err := sqlFiles.ReadFile("sql/" + string(d) + ".sql")
	if err != nil {
		return "", err
	}
	funcs := template.FuncMap{
		"col": func(logical string) (string, error) {
			c, ok := m.Column(logical)
			if !ok {
				return "", fmt.Errorf("column %q is not mapped", logical)
			}
			return quote(c), nil
		},
		"has": m.Has,
		"state": func(s string) (string, error) {
			v := m.State(outbox.State(s))
			if v == "" {
				return "", fmt.Errorf("unknown state %q", s)
			}
			return stateLit(v), nil
		},
	}
	tmpl, err := template.New(string(d)).Option("missingkey=error").Funcs(funcs).Parse(string(src))
	if err != nil {
		return "", fmt.Errorf("producer: parse %s.sql: %w", d, err)
	}
	var b bytes.Buffer
	data := struct {
		Table       string
		MaxAttempts bool
		Notify      bool
		LockClass   int
	}{m.Table(quote), withMax, notify, sqlname.NotifyLockClass}
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("producer: render %s.sql: %w", d, err)
	}
	// Drop the leading comment block: it documents the file, not the call.
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "--") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n"), nil
}

// run is a slice of consecutive rows that agree on whether they set max
// attempts: one statement.
type run struct {
	rows    []row
	withMax bool
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func runs(rows []row) []run {
	var out []run
	for i := 0; i < len(rows); {
		withMax := rows[i].MaxAttempts != nil
		j := i + 1
		for j < len(rows) && (rows[j].MaxAttempts != nil) == withMax {
			j++
		}
		out = append(out, run{rows: rows[i:j], withMax: withMax})
		i = j
	}
	return out
}

// WritePgx writes msgs in tx (PostgreSQL through pgx) and returns their
// ids in order. Nothing is written when a message is invalid. The rows
// become visible to the relay when tx commits; on rollback nothing was
// written.
func (w *Writer) WritePgx(ctx context.Context, tx pgx.Tx, msgs ...Message) ([]string, error) {
	if w.dialect != PostgreSQL {
		return nil, fmt.Errorf("producer: WritePgx needs the postgresql dialect, the writer is %s", w.dialect)
	}
	return w.write(ctx, msgs, tx == nil, func(stmt string, args []any) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, stmt, args...).Scan(&n)
		return n, err
	})
}

// WriteSQL writes msgs in tx (database/sql: PostgreSQL through pgx's stdlib
// driver, or SQL Server through go-mssqldb) and returns their ids in order.
func (w *Writer) WriteSQL(ctx context.Context, tx *sql.Tx, msgs ...Message) ([]string, error) {
	return w.write(ctx, msgs, tx == nil, func(stmt string, args []any) (int64, error) {
		if w.dialect == SQLServer {
			res, err := tx.ExecContext(ctx, stmt, args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		}
		var n int64
		err := tx.QueryRowContext(ctx, stmt, args...).Scan(&n)
		return n, err
	})
}

func (w *Writer) write(ctx context.Context, msgs []Message, nilTx bool, exec func(stmt string, args []any) (int64, error)) ([]string, error) {
	rows, ids, err := prepare(msgs, w.dialect)
	if err != nil {
		return nil, err
	}
	if err := w.storable(msgs); err != nil {
		return nil, err
	}
	if w.mapping.Has(dialect.ColHeaders) {
		addTraceContext(ctx, rows)
	}
	if nilTx {
		return nil, ErrNoTransaction
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	rs := runs(rows)
	for i, r := range rs {
		var doc bytes.Buffer
		enc := json.NewEncoder(&doc)
		enc.SetEscapeHTML(false) // SQL Server stores the payload text as is
		if err := enc.Encode(r.rows); err != nil {
			return nil, fmt.Errorf("producer: encode messages: %w", err)
		}
		stmt := w.Statement(r.withMax)
		args := []any{doc.String()}
		if w.dialect == PostgreSQL && w.notify != "" {
			// Every run's statement carries the notify; PostgreSQL folds
			// identical notifications of one transaction into one.
			args = append(args, w.notify)
		}
		n, err := exec(stmt, args)
		if err != nil {
			return nil, fmt.Errorf("producer: insert %d messages: %w", len(r.rows), err)
		}
		if n != int64(len(r.rows)) {
			return nil, fmt.Errorf("producer: inserted %d rows for %d messages (run %d)", n, len(r.rows), i)
		}
	}
	return ids, nil
}

// addTraceContext writes the W3C trace context of ctx (the caller's span,
// if any: traceparent, and tracestate when set) into the headers of every
// row that has no traceparent of its own, so that the relay's span, and
// the consumer's, continue the caller's trace.
func addTraceContext(ctx context.Context, rows []row) {
	tc := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, tc)
	if tc["traceparent"] == "" {
		return
	}
	for i := range rows {
		if slices.ContainsFunc(slices.Collect(maps.Keys(rows[i].Headers)), isTraceHeader) {
			continue
		}
		maps.Copy(rows[i].Headers, tc)
	}
}

// isTraceHeader reports a W3C trace context header name, in any case.
func isTraceHeader(name string) bool {
	return strings.EqualFold(name, "traceparent") || strings.EqualFold(name, "tracestate")
}

// storable refuses, before the database is touched, a message that sets a
// field the table has no column for (an adopted table may lack key,
// headers, aggregateType, scheduledAt and maxAttempts; the insert leaves
// absent columns out). Silently dropping the field would lose what the
// caller asked for: a key's order, a delay.
func (w *Writer) storable(msgs []Message) error {
	var errs []error
	absent := func(i int, field, logical string) {
		errs = append(errs, &ValidationError{Index: i, Field: field,
			Reason: fmt.Sprintf("the table has no %s column (it is mapped absent), so this message cannot be stored as asked", logical)})
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Key != "" && !w.mapping.Has(dialect.ColKey) {
			absent(i, FieldKey, dialect.ColKey)
		}
		if len(m.Headers) > 0 && !w.mapping.Has(dialect.ColHeaders) {
			absent(i, FieldHeaders, dialect.ColHeaders)
		}
		if m.AggregateType != "" && !w.mapping.Has(dialect.ColAggregateType) {
			absent(i, FieldAggregateType, dialect.ColAggregateType)
		}
		if !w.mapping.Has(dialect.ColScheduledAt) {
			if !m.ScheduledAt.IsZero() {
				absent(i, FieldScheduledAt, dialect.ColScheduledAt)
			}
			if m.Delay != 0 {
				absent(i, FieldDelay, dialect.ColScheduledAt)
			}
		}
		if m.MaxAttempts != 0 && !w.mapping.Has(dialect.ColMaxAttempts) {
			absent(i, FieldMaxAttempts, dialect.ColMaxAttempts)
		}
	}
	return errors.Join(errs...)
}
