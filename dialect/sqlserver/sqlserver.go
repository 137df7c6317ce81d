package sqlserver

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/sqlname"
)

//go:embed sql/*.sql sql/*.tmpl
var sqlFiles embed.FS

// DriverName is the database/sql driver name to open SQL Server with
// (registered by github.com/microsoft/go-mssqldb; import it for its side
// effect, or build the *sql.DB from mssql.NewConnector).
const DriverName = "sqlserver"

// maxIdentLen is SQL Server's sysname length.
const maxIdentLen = 128

// maxMillis is the largest millisecond count DATEADD accepts (an INT).
const maxMillis = math.MaxInt32

// claimAttempts is how often Claim runs its statement when SQL Server picks
// it as a deadlock victim (error 1205) before returning the error.
const claimAttempts = 3

var _ dialect.Dialect = (*Dialect)(nil)

// Dialect is the SQL Server dialect: the delivery-path and operator SQL
// rendered for one mapping, run on a database/sql pool of the go-mssqldb
// driver.
type Dialect struct {
	db      *sql.DB
	mapping dialect.Mapping
	queries map[string]string

	deadlockRetries atomic.Int64
}

// New renders the SQL for m and returns a Dialect that runs it on db, a pool
// opened with driver "sqlserver". New does not connect; call Ping to check
// the server.
func New(db *sql.DB, m dialect.Mapping) (*Dialect, error) {
	if db == nil {
		return nil, errors.New("sqlserver: nil *sql.DB")
	}
	queries, err := Render(m)
	if err != nil {
		return nil, err
	}
	return &Dialect{db: db, mapping: m, queries: queries}, nil
}

// Ping checks that the server answers, with the cause (host, login,
// database) in the error.
func (d *Dialect) Ping(ctx context.Context) error {
	return interpretError("ping", d.db.PingContext(ctx))
}

// DeadlockRetries is how many times Claim has re-run its statement after
// SQL Server chose it as a deadlock victim (error 1205).
func (d *Dialect) DeadlockRetries() int64 { return d.deadlockRetries.Load() }

// QueryNames returns the names of the embedded queries, sorted. It equals
// dialect.QueryNames() and the PostgreSQL dialect's set.
func QueryNames() []string {
	entries, err := fs.ReadDir(sqlFiles, "sql")
	if err != nil {
		panic(err) // embedded at build time
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".sql"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// QuoteIdent quotes one identifier part for SQL Server: [x], with embedded
// closing brackets doubled.
func QuoteIdent(s string) string { return sqlname.SQLServer(s) }

// quoteLiteral quotes a string constant as a Unicode literal: N'x'.
func quoteLiteral(s string) string { return "N" + sqlname.Literal(s) }

// Render returns the SQL of every query name rendered for m. It is what New
// runs once; it is exported for inspection and for tests.
func Render(m dialect.Mapping) (map[string]string, error) {
	if m.TableName() == "" {
		return nil, errors.New("sqlserver: empty mapping (use dialect.DefaultMapping or dialect.NewMapping)")
	}
	for _, ident := range append(mapValues(m.Columns()), m.Schema(), m.TableName()) {
		if len(ident) > maxIdentLen {
			return nil, fmt.Errorf("sqlserver: identifier %q is longer than %d characters", ident, maxIdentLen)
		}
	}
	// SQL Server has lease mode only (no lock mode): the claim columns and a
	// processing state are required here, whatever else the table lacks.
	for _, c := range dialect.LeaseColumns {
		if !m.Has(c) {
			return nil, fmt.Errorf("sqlserver: the table needs a %s column (the SQL Server dialect claims with leases only; the lease columns are %v)", c, dialect.LeaseColumns)
		}
	}
	if !m.HasState(outbox.StateProcessing) {
		return nil, errors.New("sqlserver: the table needs a processing state value (the SQL Server dialect claims with leases only)")
	}
	data := struct{ Table string }{Table: m.Table(QuoteIdent)}
	funcs := template.FuncMap{
		"col": func(logical string) (string, error) {
			c, ok := m.Column(logical)
			if !ok {
				return "", fmt.Errorf("column %q is not mapped", logical)
			}
			return QuoteIdent(c), nil
		},
		"has": m.Has,
		// optional: the optional columns the claim's CTE carries when the
		// table has them, in a fixed order.
		"optional": func() []string {
			return []string{dialect.ColKey, dialect.ColHeaders, dialect.ColAggregateType, dialect.ColAttempt,
				dialect.ColMaxAttempts, dialect.ColCreatedAt, dialect.ColScheduledAt, dialect.ColUpdatedAt}
		},
		"state": func(s string) (string, error) {
			v := m.State(outbox.State(s))
			if v == "" {
				return "", fmt.Errorf("unknown state %q", s)
			}
			return quoteLiteral(v), nil
		},
	}
	out := make(map[string]string, len(dialect.QueryNames()))
	for _, name := range QueryNames() {
		src, err := sqlFiles.ReadFile(path.Join("sql", name+".sql"))
		if err != nil {
			return nil, err
		}
		// The shared templates (sql/*.tmpl, such as replayFilter) come
		// first, so that every query may call them.
		tmpl, err := template.New(name).Option("missingkey=error").Funcs(funcs).ParseFS(sqlFiles, "sql/*.tmpl")
		if err == nil {
			tmpl, err = tmpl.Parse(string(src))
		}
		if err != nil {
			return nil, fmt.Errorf("sqlserver: parse %s.sql: %w", name, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("sqlserver: render %s.sql: %w", name, err)
		}
		out[name] = b.String()
	}
	return out, nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// millis converts a duration to whole milliseconds for DATEADD, rounding
// up so that a positive duration never becomes 0.
func millis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

func leaseMillis(op string, lease time.Duration) (int32, error) {
	ms := millis(lease)
	if ms <= 0 {
		return 0, fmt.Errorf("sqlserver: %s: lease must be positive", op)
	}
	if ms > maxMillis {
		return 0, fmt.Errorf("sqlserver: %s: lease %v is longer than SQL Server's DATEADD allows (%v)", op, lease, time.Duration(maxMillis)*time.Millisecond)
	}
	return int32(ms), nil
}

// checkUUIDs refuses ids that are not UUIDs before they reach the server: a
// conversion error there would fail the whole batch. Such an id is a bug in
// the caller, which no retry fixes.
func checkUUIDs(op string, token string, ids ...string) error {
	if !isUUID(token) {
		return outbox.Permanent(fmt.Errorf("sqlserver: %s: claim token %q is not a UUID", op, dialect.Snippet([]byte(token))))
	}
	for _, id := range ids {
		if !isUUID(id) {
			return outbox.Permanent(fmt.Errorf("sqlserver: %s: id %q is not a UUID", op, dialect.Snippet([]byte(id))))
		}
	}
	return nil
}

// isUUID accepts the canonical 8-4-4-4-12 form only, which is what SQL
// Server converts to UNIQUEIDENTIFIER.
func isUUID(s string) bool {
	return len(s) == 36 && uuid.Validate(s) == nil
}

// Claim implements dialect.Dialect.
func (d *Dialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	leaseMS, err := leaseMillis("claim", p.Lease)
	if err != nil {
		return nil, err
	}
	if err := checkUUIDs("claim", p.Token); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		msgs, err := d.claimOnce(ctx, p, leaseMS)
		if err == nil || attempt == claimAttempts || !isDeadlockVictim(err) {
			return msgs, err
		}
		// The statement was rolled back as a whole: nothing was claimed.
		d.deadlockRetries.Add(1)
		wait := time.Duration(attempt)*5*time.Millisecond + rand.N(10*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

func (d *Dialect) claimOnce(ctx context.Context, p dialect.ClaimParams, leaseMS int32) ([]outbox.Message, error) {
	rows, err := d.db.QueryContext(ctx, d.queries["claim"],
		sql.Named("token", p.Token), sql.Named("limit", int64(p.Limit)), sql.Named("lease_ms", leaseMS))
	if err != nil {
		return nil, interpretError("claim", err)
	}
	defer rows.Close()
	msgs := make([]outbox.Message, 0, p.Limit)
	for rows.Next() {
		var (
			m                                   outbox.Message
			key, payload, headers, aggregateTyp sql.NullString
		)
		if err := rows.Scan(&m.ID, &m.Topic, &key, &payload, &headers, &aggregateTyp,
			&m.Attempt, &m.MaxAttempts, &m.Sequence, &m.CreatedAt, &m.ScheduledAt); err != nil {
			return nil, interpretError("claim", err)
		}
		m.Key = key.String
		m.AggregateType = aggregateTyp.String
		m.CreatedAt, m.ScheduledAt = m.CreatedAt.UTC(), m.ScheduledAt.UTC()
		m.Payload = []byte(payload.String)
		m.Headers, m.Malformed = dialect.DecodeHeaders([]byte(headers.String))
		if !json.Valid(m.Payload) {
			m.Malformed = fmt.Errorf("payload is not valid JSON: %s", dialect.Snippet(m.Payload))
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("claim", err)
	}
	// OUTPUT follows the plan's row order, not the CTE's ORDER BY.
	slices.SortFunc(msgs, func(a, b outbox.Message) int {
		if a.Sequence != b.Sequence {
			if a.Sequence < b.Sequence {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return msgs, nil
}

// Renew implements dialect.Dialect.
func (d *Dialect) Renew(ctx context.Context, p dialect.RenewParams) (int64, error) {
	leaseMS, err := leaseMillis("renew", p.Lease)
	if err != nil {
		return 0, err
	}
	if err := checkUUIDs("renew", p.Token); err != nil {
		return 0, err
	}
	return d.exec(ctx, "renew", sql.Named("token", p.Token), sql.Named("lease_ms", leaseMS))
}

// Complete implements dialect.Dialect.
func (d *Dialect) Complete(ctx context.Context, p dialect.CompleteParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	if err := checkUUIDs("complete", p.Token, p.IDs...); err != nil {
		return 0, err
	}
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "complete", sql.Named("token", p.Token), sql.Named("ids", string(ids)))
}

type retryItem struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
	DelayMS int64  `json:"delay_ms"`
	Error   string `json:"error"`
}

// Retry implements dialect.Dialect. Delays beyond DATEADD's range (about
// 24.8 days) are capped there.
func (d *Dialect) Retry(ctx context.Context, p dialect.RetryParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	items := make([]retryItem, len(p.Items))
	ids := make([]string, len(p.Items))
	for i, it := range p.Items {
		items[i] = retryItem{ID: it.ID, Attempt: it.Attempt, DelayMS: min(millis(max(it.Delay, 0)), maxMillis), Error: it.Error}
		ids[i] = it.ID
	}
	if err := checkUUIDs("retry", p.Token, ids...); err != nil {
		return 0, err
	}
	doc, err := json.Marshal(items)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "retry", sql.Named("token", p.Token), sql.Named("items", string(doc)))
}

type deadItem struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
}

// Dead implements dialect.Dialect.
func (d *Dialect) Dead(ctx context.Context, p dialect.DeadParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	items := make([]deadItem, len(p.Items))
	ids := make([]string, len(p.Items))
	for i, it := range p.Items {
		items[i] = deadItem{ID: it.ID, Attempt: it.Attempt, Error: it.Error}
		ids[i] = it.ID
	}
	if err := checkUUIDs("dead", p.Token, ids...); err != nil {
		return 0, err
	}
	doc, err := json.Marshal(items)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "dead", sql.Named("token", p.Token), sql.Named("items", string(doc)))
}

// Release implements dialect.Dialect. An empty IDs releases nothing.
func (d *Dialect) Release(ctx context.Context, p dialect.ReleaseParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	if err := checkUUIDs("release", p.Token, p.IDs...); err != nil {
		return 0, err
	}
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "release", sql.Named("token", p.Token), sql.Named("ids", string(ids)))
}

// ReleaseExpired implements dialect.Dialect.
func (d *Dialect) ReleaseExpired(ctx context.Context, p dialect.ReleaseExpiredParams) (int64, error) {
	if p.Limit <= 0 {
		return 0, nil
	}
	return d.exec(ctx, "release_expired", sql.Named("limit", int64(p.Limit)))
}

func (d *Dialect) exec(ctx context.Context, name string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, d.queries[name], args...)
	if err != nil {
		return 0, interpretError(name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, interpretError(name, err)
	}
	return n, nil
}
