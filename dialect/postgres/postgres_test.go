package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/dialecttest"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// newDialect is New on the bundled table's mapping; a failure ends the test.
func newDialect(t *testing.T, pool *pgxpool.Pool, opts ...Option) *Dialect {
	t.Helper()
	d, err := New(pool, dialect.DefaultMapping(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConformance runs the suite on the claim that `queuebox run` renders
// for the bundled table (its id is the primary key: WithUniqueID) and on the
// guarded claim of a table whose id may not be unique.
func TestConformance(t *testing.T) {
	for _, unique := range []bool{true, false} {
		t.Run(fmt.Sprintf("uniqueID=%v", unique), func(t *testing.T) {
			dialecttest.Run(t, func(t *testing.T) dialecttest.Harness {
				pg := testenv.Postgres(t)
				d := newDialect(t, pg.Pool, WithUniqueID(unique))
				return &harness{pool: pg.Pool, d: d, unique: unique}
			})
		})
	}
}

// harness implements dialecttest.Harness on the bundled table in the test's
// own schema (the pool's search_path).
type harness struct {
	pool   *pgxpool.Pool
	d      *Dialect
	unique bool // WithUniqueID
}

func (h *harness) Dialect() dialect.Dialect { return h.d }

// HoldDialect implements dialecttest.HoldHarness: the same table, rendered
// for relay.onDead: hold.
func (h *harness) HoldDialect() dialect.Dialect {
	d, err := New(h.pool, dialect.DefaultMapping(), WithHoldDeadKeys(true), WithUniqueID(h.unique))
	if err != nil {
		panic(err) // the default mapping always renders
	}
	return d
}

// Age implements dialecttest.Ager.
func (h *harness) Age(ctx context.Context, id string, by time.Duration) error {
	tag, err := h.pool.Exec(ctx, `UPDATE outbox SET created_at = created_at - $2::bigint * interval '1 microsecond',
		scheduled_at = scheduled_at - $2::bigint * interval '1 microsecond',
		updated_at = updated_at - $2::bigint * interval '1 microsecond' WHERE id = $1`, id, by.Microseconds())
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("age: no row %s", id)
	}
	return err
}

const insertSQL = `INSERT INTO outbox (topic, key, payload, headers, max_attempts, scheduled_at)
VALUES ($1, $2, $3::jsonb, COALESCE($4::jsonb, '{}'::jsonb), COALESCE($5, 5), now() + $6::bigint * interval '1 microsecond')
RETURNING id::text`

func insertArgs(r dialecttest.Row) []any {
	topic := r.Topic
	if topic == "" {
		topic = "test.topic"
	}
	var key, headers *string
	if r.Key != "" || r.EmptyKey {
		key = &r.Key
	}
	if r.Headers != "" {
		headers = &r.Headers
	}
	payload := r.Payload
	if payload == "" {
		payload = "{}"
	}
	var maxAttempts *int32
	if r.MaxAttempts != 0 {
		v := int32(r.MaxAttempts)
		maxAttempts = &v
	}
	return []any{topic, key, payload, headers, maxAttempts, r.Delay.Microseconds()}
}

func (h *harness) Insert(ctx context.Context, rows ...dialecttest.Row) ([]string, error) {
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(insertSQL, insertArgs(r)...)
	}
	// A batch runs its statements in order in one implicit transaction.
	res := h.pool.SendBatch(ctx, b)
	defer res.Close()
	ids := make([]string, len(rows))
	for i := range rows {
		if err := res.QueryRow().Scan(&ids[i]); err != nil {
			return nil, err
		}
	}
	return ids, res.Close()
}

type writer struct{ tx pgx.Tx }

func (h *harness) Begin(ctx context.Context) (dialecttest.Writer, error) {
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &writer{tx: tx}, nil
}

func (w *writer) Insert(ctx context.Context, r dialecttest.Row) (string, error) {
	var id string
	err := w.tx.QueryRow(ctx, insertSQL, insertArgs(r)...).Scan(&id)
	return id, err
}
func (w *writer) Commit(ctx context.Context) error   { return w.tx.Commit(ctx) }
func (w *writer) Rollback(ctx context.Context) error { return w.tx.Rollback(ctx) }

func (h *harness) Row(ctx context.Context, id string) (dialecttest.RowState, error) {
	var (
		r     dialecttest.RowState
		state string
		token *string
	)
	err := h.pool.QueryRow(ctx, `SELECT state, attempt, max_attempts, last_error, scheduled_at,
		claim_token::text, lease_expires_at, sequence FROM outbox WHERE id = $1`, id).
		Scan(&state, &r.Attempt, &r.MaxAttempts, &r.LastError, &r.ScheduledAt, &token, &r.LeaseExpiresAt, &r.Sequence)
	r.State = outbox.State(state)
	if token != nil {
		r.ClaimToken = *token
	}
	return r, err
}

func (h *harness) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := h.pool.QueryRow(ctx, `SELECT now()`).Scan(&now)
	return now, err
}

func (h *harness) ExpireLease(ctx context.Context, id string) error {
	tag, err := h.pool.Exec(ctx, `UPDATE outbox SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("expire lease: no row %s", id)
	}
	return err
}

func TestQueryNamesMatchDialect(t *testing.T) {
	if got, want := QueryNames(), dialect.QueryNames(); !slices.Equal(got, want) {
		t.Fatalf("embedded queries %v, want dialect.QueryNames() %v", got, want)
	}
}

func TestRenderQuotesReservedWords(t *testing.T) {
	m, err := dialect.NewMapping("app.order", map[string]string{
		"key": "key", "topic": "order", "aggregateType": "user", "state": `select`, "sentAt": "sent_at",
	}, map[string]string{"dead": "it's dead"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Render(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dialect.QueryNames() {
		if q[name] == "" {
			t.Errorf("query %s not rendered", name)
		}
		if strings.Contains(q[name], "{{") {
			t.Errorf("query %s has an unrendered action", name)
		}
	}
	for _, want := range []string{`"app"."order"`, `o."order"`, `o."user"`, `c."key"`, `c."select" = 'pending'`} {
		if !strings.Contains(q["claim"], want) {
			t.Errorf("claim lacks %s:\n%s", want, q["claim"])
		}
	}
	if !strings.Contains(q["dead"], `'it''s dead'`) {
		t.Errorf("dead does not quote the state literal:\n%s", q["dead"])
	}
	if !strings.Contains(q["complete"], `"sent_at" = now()`) {
		t.Errorf("complete does not set the optional sentAt column:\n%s", q["complete"])
	}
	if d, _ := Render(dialect.DefaultMapping()); strings.Contains(d["complete"], "sent_at") {
		t.Error("default mapping sets sent_at, which the bundled table lacks")
	}
}

// TestRenderedSQLRunsWithReservedNames creates a table whose columns are
// reserved words and runs a claim and a complete through the mapping.
func TestRenderedSQLRunsWithReservedNames(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	ctx := testenv.Context(t, 30*time.Second)
	_, err := pg.Pool.Exec(ctx, `
		CREATE TABLE "order" (
			"user" uuid PRIMARY KEY DEFAULT gen_random_uuid(), "select" text NOT NULL, "key" text,
			"from" jsonb NOT NULL, "where" jsonb NOT NULL DEFAULT '{}', "group" text,
			"table" text NOT NULL DEFAULT 'waiting', "limit" int NOT NULL DEFAULT 0, "offset" int NOT NULL DEFAULT 5,
			"when" timestamptz NOT NULL DEFAULT now(), "create" timestamptz NOT NULL DEFAULT now(),
			"update" timestamptz NOT NULL DEFAULT now(), "grant" timestamptz, "check" uuid,
			"end" timestamptz, "desc" text, "order" bigserial)`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dialect.NewMapping("order", map[string]string{
		"id": "user", "topic": "select", "key": "key", "payload": "from", "headers": "where",
		"aggregateType": "group", "state": "table", "attempt": "limit", "maxAttempts": "offset",
		"scheduledAt": "when", "createdAt": "create", "updatedAt": "update", "claimedAt": "grant",
		"claimToken": "check", "leaseExpiresAt": "end", "lastError": "desc", "sequence": "order",
	}, map[string]string{"pending": "waiting", "processing": "busy", "sent": "done"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(pg.Pool, m)
	if err != nil {
		t.Fatal(err)
	}
	pg.MustExec(t, ctx, `INSERT INTO "order" ("select", "key", "from") VALUES ('t', 'k', '{"a":1}'), ('t', 'k', '{"a":2}')`)
	tok := "6f1c1a5e-0000-4000-8000-000000000001"
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: tok, Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Key != "k" {
		t.Fatalf("claim = %+v, want the head of k", msgs)
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: tok, IDs: []string{msgs[0].ID}})
	if err != nil || n != 1 {
		t.Fatalf("complete = %d, %v", n, err)
	}
	var state string
	if err := pg.Pool.QueryRow(ctx, `SELECT "table" FROM "order" WHERE "user" = $1`, msgs[0].ID).Scan(&state); err != nil || state != "done" {
		t.Fatalf("stored state %q (%v), want done", state, err)
	}
	// The windowed claim (claim_window.tmpl) through the same names: the
	// key's second row is its head now.
	next, err := d.Claim(ctx, dialect.ClaimParams{Token: tok, Limit: 10, Lease: time.Minute, Window: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 1 || next[0].Key != "k" || next[0].Sequence <= msgs[0].Sequence {
		t.Fatalf("windowed claim = %+v, want the second row of k", next)
	}
}

func TestMappingRejectsInjection(t *testing.T) {
	bad := []struct {
		table   string
		columns map[string]string
		states  map[string]string
		want    string
	}{
		{table: "outbox; drop table x", want: "not a plain identifier"},
		{table: `outbox"`, want: "not a plain identifier"},
		{table: "a.b.c", want: "schema.table"},
		{table: "1outbox", want: "not a plain identifier"},
		{columns: map[string]string{"topic": "topic; drop table x --"}, want: "not a plain identifier"},
		{columns: map[string]string{"topic": `to"pic`}, want: "not a plain identifier"},
		{columns: map[string]string{"topci": "topic"}, want: `unknown logical column "topci" (known: aggregateType, attempt,`},
		{columns: map[string]string{"leaseExpiry": "lease"}, want: "unknown logical column"},
		{columns: map[string]string{"topic": "key"}, want: "both map to column"},
		{states: map[string]string{"pendng": "p"}, want: `unknown state "pendng" (known: pending, processing, sent, dead)`},
		{states: map[string]string{"sent": "pending"}, want: "both stored as"},
		{states: map[string]string{"sent": ""}, want: "not a usable stored value"},
	}
	for _, tc := range bad {
		_, err := dialect.NewMapping(tc.table, tc.columns, tc.states)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewMapping(%q, %v, %v) = %v, want an error containing %q", tc.table, tc.columns, tc.states, err, tc.want)
		}
	}
	long := strings.Repeat("a", 64)
	m, err := dialect.NewMapping(long, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(m); err == nil {
		t.Error("Render accepted a 64-byte identifier that PostgreSQL would truncate")
	}
}

// unsent is an error that pgconn.SafeToRetry reports as never sent.
type unsent struct{}

func (unsent) Error() string     { return "write failed before the query was sent" }
func (unsent) SafeToRetry() bool { return true }

func TestInterpretError(t *testing.T) {
	perm := []string{"23505", "22P02", "42P01", "42703", "P0001"}
	for _, code := range perm {
		if err := interpretError("q", &pgconn.PgError{Code: code}); !outbox.IsPermanent(err) {
			t.Errorf("%s: not permanent", code)
		}
	}
	retry := []string{"40001", "40P01", "57P01", "08006", "53300", "57014"}
	for _, code := range retry {
		if err := interpretError("q", &pgconn.PgError{Code: code}); !outbox.IsRetryable(err) {
			t.Errorf("%s: not retryable", code)
		}
	}
	if err := interpretError("q", context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("context error lost: %v", err)
	}
	// Whether the statement may have committed all the same.
	_, connectErr := pgconn.Connect(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	var ce *pgconn.ConnectError
	if !errors.As(connectErr, &ce) {
		t.Fatalf("connecting to a closed port: %v, want a *pgconn.ConnectError", connectErr)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"server error", &pgconn.PgError{Code: "40P01"}, false},
		{"constraint", &pgconn.PgError{Code: "23505"}, false},
		{"never sent", unsent{}, false},
		{"no connection", connectErr, false},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
	} {
		if got := outbox.IsMaybeApplied(interpretError("q", tc.err)); got != tc.want {
			t.Errorf("%s: maybe applied %v, want %v", tc.name, got, tc.want)
		}
	}
	if interpretError("q", nil) != nil {
		t.Error("nil error not nil")
	}
}

// TestBadIDIsPermanent drives a real data error through the dialect: an id
// that is not a UUID.
func TestBadIDIsPermanent(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	_, err := d.Dead(ctx, dialect.DeadParams{Token: "6f1c1a5e-0000-4000-8000-000000000001", Items: []dialect.DeadItem{{ID: "not-a-uuid"}}})
	if err == nil {
		t.Fatal("dead with a malformed id succeeded")
	}
	if !outbox.IsPermanent(err) {
		t.Fatalf("malformed id: %v is not permanent", err)
	}
}

// TestClaimPlanUsesIndexes loads a few thousand rows, most of them sent,
// and checks that the claim's plan reads the partial indexes instead of
// scanning the table.
func TestClaimPlanUsesIndexes(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	d := newDialect(t, pg.Pool)
	_, err := pg.Pool.Exec(ctx, `
		INSERT INTO outbox (topic, key, payload, state)
		SELECT 'load.' || (g % 10), CASE WHEN g % 5 = 0 THEN NULL ELSE 'k' || (g % 200) END,
		       jsonb_build_object('g', g), CASE WHEN g <= 18000 THEN 'sent' ELSE 'pending' END
		FROM generate_series(1, 20000) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	pg.MustExec(t, ctx, `ANALYZE outbox`)
	explain := func(name string, args ...any) string {
		query := d.queries[name]
		switch name {
		case "claim":
			query, err = d.claims.sql(claimShape{limit: 100, window: 0})
		case "claim#window":
			query, err = d.claims.sql(claimShape{limit: 100, window: 1000})
		}
		if err != nil {
			t.Fatal(err)
		}
		return explainPlan(t, ctx, pg.Pool, query, args...)
	}
	token := "6f1c1a5e-0000-4000-8000-000000000001"
	plans := map[string]string{
		"claim":           explain("claim", token, int64(30e6)),
		"claim#window":    explain("claim#window", token, int64(30e6), int64(math.MinInt64), []string{}),
		"release_expired": explain("release_expired", 100),
		"complete":        explain("complete", token, []string{token}),
		// The operator queries on finished and pending rows (migration
		// 00003: indexes split by state).
		"purge":         explain("purge", "sent", int64(24*time.Hour/time.Microsecond), 1000),
		"dead_list":     explain("dead_list", nil, nil, nil, 50, nil),
		"stats_backlog": explain("stats_backlog", 10),
		// The relay's gauges (StatsParams.WithoutSent). With the sent
		// count, a table of sent rows may well be read whole.
		"stats_counts#gauges": explain("stats_counts", false),
	}
	for name, plan := range plans {
		if strings.Contains(plan, "Seq Scan on outbox") {
			t.Errorf("%s plan scans the whole table:\n%s", name, plan)
		}
	}
	for _, name := range []string{"claim", "claim#window"} {
		for _, idx := range []string{"outbox_claim_idx", "outbox_key_sequence_idx"} {
			if !strings.Contains(plans[name], idx) {
				t.Errorf("%s plan does not use %s:\n%s", name, idx, plans[name])
			}
		}
	}
	for name, idx := range map[string]string{"purge": "outbox_finished_idx", "dead_list": "outbox_finished_idx", "stats_backlog": "outbox_pending_"} {
		if !strings.Contains(plans[name], idx) {
			t.Errorf("%s plan does not use %s:\n%s", name, idx, plans[name])
		}
	}
	// The claim that `queuebox run` renders for the bundled table, whose id
	// is the primary key (WithUniqueID): the same indexes, one head-of-key
	// probe fewer.
	unique := newDialect(t, pg.Pool, WithUniqueID(true))
	for name, shape := range map[string]claimShape{"claim": {limit: 100}, "claim#window": {limit: 100, window: 1000}} {
		query, err := unique.claims.sql(shape)
		if err != nil {
			t.Fatal(err)
		}
		args := []any{token, int64(30e6)}
		if shape.window > 0 {
			args = append(args, int64(math.MinInt64), []string{})
		}
		plan := explainPlan(t, ctx, pg.Pool, query, args...)
		if strings.Contains(plan, "Seq Scan on outbox") {
			t.Errorf("%s (unique id) plan scans the whole table:\n%s", name, plan)
		}
		for _, idx := range []string{"outbox_claim_idx", "outbox_key_sequence_idx"} {
			if !strings.Contains(plan, idx) {
				t.Errorf("%s (unique id) plan does not use %s:\n%s", name, idx, plan)
			}
		}
		probes, guarded := strings.Count(plan, "outbox_key_sequence_idx"), strings.Count(plans[name], "outbox_key_sequence_idx")
		if probes >= guarded {
			t.Errorf("%s (unique id) plan probes the key index %d times, the guarded one %d:\n%s", name, probes, guarded, plan)
		}
	}
	const sentRange = "'sent'::text"
	if counts := explain("stats_counts", true); !strings.Contains(counts, sentRange) {
		t.Errorf("stats_counts does not count the sent rows:\n%s", counts)
	}
	if strings.Contains(plans["stats_counts#gauges"], sentRange) || !strings.Contains(plans["stats_counts#gauges"], "One-Time Filter: false") {
		t.Errorf("stats_counts without the sent count still reads the sent range:\n%s", plans["stats_counts#gauges"])
	}
	if t.Failed() {
		return
	}
	// And the claim does what the plan promises on this data: 100 rows,
	// one per key at most.
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 100 {
		t.Fatalf("claimed %d rows, want 100", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Key != "" && seen[m.Key] {
			t.Fatalf("key %s claimed twice", m.Key)
		}
		seen[m.Key] = true
	}
}

// querier is a pool or one connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// explainPlan returns the text of EXPLAIN query (without ANALYZE: nothing
// runs).
func explainPlan(t *testing.T, ctx context.Context, db querier, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, query)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestClaimKeepsTheOrderedScan: on a table whose physical order does not
// follow sequence (the usual state of a busy outbox, whose new row versions
// land wherever a page has room), the windowed claims of both modes still
// read outbox_claim_idx in order and stop at the limit, from the front and
// past it (dialect.ClaimParams.From). A window written as
// a two-sided range over values computed in the statement (first <=
// sequence < first + W) made the planner estimate 0.5 % of the pending
// rows in the window instead of a third, and choose a bitmap scan of the
// whole window plus a sort: several times the buffers of the ordered scan.
func TestClaimKeepsTheOrderedScan(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	d := newDialect(t, pg.Pool)
	lock, err := NewLockMode(pg.Pool, dialect.DefaultMapping(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lock.Close)
	// Explicit sequences, rows written in random order: the heap's
	// correlation with sequence is about 0.
	pg.MustExec(t, ctx, `
		INSERT INTO outbox (topic, key, payload, state, sequence)
		SELECT 'load', 'k' || (g % 200), jsonb_build_object('g', g),
		       CASE WHEN g <= 18000 THEN 'sent' ELSE 'pending' END, g
		FROM generate_series(1, 20000) AS g
		ORDER BY random()`)
	pg.MustExec(t, ctx, `VACUUM ANALYZE outbox`)
	var correlation float64
	if err := pg.Pool.QueryRow(ctx, `SELECT correlation FROM pg_stats
		WHERE tablename = 'outbox' AND attname = 'sequence' AND schemaname = current_schema()`).Scan(&correlation); err != nil {
		t.Fatal(err)
	}
	if correlation > 0.3 || correlation < -0.3 {
		t.Fatalf("setup: heap correlation with sequence %.2f, want about 0", correlation)
	}
	// A connection set up as the relay's are.
	cc := pg.Pool.Config().ConnConfig.Copy()
	PlanEachExecution(cc)
	NoJIT(cc)
	NoBitmapScans(cc)
	relayConn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relayConn.Close(context.Background()) })
	for _, tc := range []struct {
		name   string
		shapes *claimShapes
		sweep  bool
	}{{"lease", d.claims, false}, {"lock", lock.claims, false}, {"lease past the front", d.claims, true}, {"lock past the front", lock.claims, true}} {
		name := tc.name
		query, err := tc.shapes.sql(claimShape{limit: 100, window: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var args []any
		if tc.shapes == d.claims {
			args = append(args, "6f1c1a5e-0000-4000-8000-000000000001", int64(30e6))
		}
		if tc.sweep {
			args = append(args, int64(19000), []string{"k7"})
		} else {
			args = append(args, int64(math.MinInt64), []string{})
		}
		plan := explainPlan(t, ctx, relayConn, query, args...)
		if !strings.Contains(plan, "Index Scan using outbox_claim_idx on outbox c") || strings.Contains(plan, "Bitmap Heap Scan on outbox c") {
			t.Errorf("%s claim does not read outbox_claim_idx in order:\n%s", name, plan)
		}
	}
}

// TestClaimShapes: the batch size and the window are literals of the
// rendered claim (a generic plan and a custom one are the same), each shape
// is rendered once, and only the token, the lease and (windowed) the
// window's start and the keys to skip are parameters.
func TestClaimShapes(t *testing.T) {
	m := dialect.DefaultMapping()
	c, err := newClaimShapes(sqlFiles, "sql/claim.sql", "$3", m, options{})
	if err != nil {
		t.Fatal(err)
	}
	windowed, err := c.sql(claimShape{limit: 250, window: 4000})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LIMIT 250", "+ 4000::bigint", "$1", "$2::bigint", ">= $3::bigint", "ALL($4::text[])"} {
		if !strings.Contains(windowed, want) {
			t.Errorf("windowed claim lacks %q:\n%s", want, windowed)
		}
	}
	if strings.Contains(windowed, "$5") {
		t.Errorf("windowed claim has more than four parameters (token, lease, window start, skip list):\n%s", windowed)
	}
	full, err := c.sql(claimShape{limit: 250, window: 0})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(full, "LIMIT 250") || strings.Contains(full, "::bigint\n    ORDER BY") || strings.Contains(full, "AS w") {
		t.Errorf("unbounded claim is wrong:\n%s", full)
	}
	for i := 0; i < 2*maxClaimShapes; i++ {
		if _, err := c.sql(claimShape{limit: i + 1, window: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.shapes); n > maxClaimShapes {
		t.Errorf("%d shapes kept, want at most %d", n, maxClaimShapes)
	}
}

// TestClaimsTakeTableTurns: with table claim turns (the default) a claim
// waits while another claim of the table holds the turn, then runs on a
// snapshot taken after it: it sees what the other claim took. A dialect
// with replica turns does not wait. The turn is released with the claim.
func TestClaimsTakeTableTurns(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	turns := newDialect(t, pg.Pool)
	free := newDialect(t, pg.Pool, WithTableClaimTurns(false))
	if turns.turnSQL == "" || free.turnSQL != "" {
		t.Fatalf("turn SQL %q by default and %q with WithTableClaimTurns(false)", turns.turnSQL, free.turnSQL)
	}
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns', '{}')`)

	// Another claimer holds the table's turn.
	holder := holdTurn(t, ctx, pg.Pool, turns)

	// A poll does not queue behind the holder: it reports the turn busy at
	// once and claims nothing.
	polled, err := turns.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000a0", Limit: 10, Lease: time.Minute, Poll: true})
	if !errors.Is(err, dialect.ErrClaimTurnBusy) || len(polled) != 0 {
		t.Fatalf("poll while the turn is held: %d rows, %v; want dialect.ErrClaimTurnBusy", len(polled), err)
	}

	type result struct {
		msgs []outbox.Message
		err  error
	}
	waiting := make(chan result, 1)
	go func() {
		msgs, err := turns.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000a1", Limit: 10, Lease: time.Minute})
		waiting <- result{msgs, err}
	}()
	// This table's turn in pg_locks (a bigint key is classid = high half,
	// objid = low half, objsubid 1); other tests may hold other turns.
	const turnLocks = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::bigint = $1 AND objid = 'outbox'::regclass::oid`
	// The waiting claim shows up as a backend waiting for the turn.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pg.Pool.QueryRow(ctx, turnLocks+` AND NOT granted`, claimTurnSpace).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-waiting:
			t.Fatalf("claim ran while another held the table's turn: %d rows, %v", len(r.msgs), r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the table's turn")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Replica turns do not wait; this claim takes the row.
	got, err := free.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000a2", Limit: 10, Lease: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim with replica turns: %d rows, %v; want the one row at once", len(got), err)
	}
	// The holder commits a row of its own: only a snapshot taken after the
	// turn was granted sees it. (The claim is planned before it waits for
	// the turn: turnClaim.)
	var late string
	if err := holder.QueryRow(ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns.late', '{}') RETURNING id::text`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waiting
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.msgs) != 1 || r.msgs[0].ID != late {
		t.Fatalf("the waiting claim took %v; want only the row the turn's holder committed (%s): not the row the other claim took, not a snapshot from before the turn", r.msgs, late)
	}
	var held int
	if err := pg.Pool.QueryRow(ctx, turnLocks, claimTurnSpace).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d advisory locks held after the claims: the turn outlived its claim", held)
	}

	// With the turn free, a poll is an ordinary claim, and releases the
	// turn with it.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns', '{}')`)
	polled, err = turns.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000a3", Limit: 10, Lease: time.Minute, Poll: true})
	if err != nil || len(polled) != 1 {
		t.Fatalf("poll with the turn free: %d rows, %v; want the new row", len(polled), err)
	}
	if err := pg.Pool.QueryRow(ctx, turnLocks, claimTurnSpace).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d advisory locks held after a poll: the turn outlived its claim", held)
	}
}

// TestClaimBlockersLeaveOutSkippedKeys: the keys a claim is told to skip
// are not named among what holds its window, so that every claim names
// keys the engine does not step around yet. Rows a1 b1 a2 b2 a3 b3 c1 with
// a's and b's heads in flight: a claim skipping a takes c1 and names b's
// two rows, not a's.
func TestClaimBlockersLeaveOutSkippedKeys(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	d := newDialect(t, pg.Pool, WithUniqueID(true))
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES
		('t', 'a', '{}'), ('t', 'b', '{}'), ('t', 'a', '{}'), ('t', 'b', '{}'), ('t', 'a', '{}'), ('t', 'b', '{}'), ('t', 'c', '{}')`); err != nil {
		t.Fatal(err)
	}
	claim := func(limit int, skip ...string) dialect.Claimed {
		t.Helper()
		c, err := d.ClaimNext(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: limit, Lease: time.Minute, Window: 1000, Skip: skip})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if n := len(claim(1).Messages) + len(claim(1).Messages); n != 2 {
		t.Fatalf("the two heads: %d claimed", n)
	}
	c := claim(100, "a")
	if len(c.Messages) != 1 || c.Messages[0].Key != "c" || !slices.Equal(c.Blockers, []string{"b", "b"}) {
		t.Fatalf("claim skipping a: %d rows, blockers %q; want c's row, and b's two rows", len(c.Messages), c.Blockers)
	}
}
