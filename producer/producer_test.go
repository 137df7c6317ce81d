package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/producer"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestValidation(t *testing.T) {
	w, err := producer.New()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 256) // 256 characters, 512 bytes
	ok := producer.Message{Topic: "t", Payload: map[string]int{"a": 1}}
	cases := []struct {
		name  string
		msg   producer.Message
		field string
		want  string
	}{
		{"empty topic", producer.Message{Payload: 1}, producer.FieldTopic, "is required"},
		{"long topic", producer.Message{Topic: long, Payload: 1}, producer.FieldTopic, "256 characters"},
		{"long key", producer.Message{Topic: "t", Key: long, Payload: 1}, producer.FieldKey, "more than 255"},
		{"long aggregate type", producer.Message{Topic: "t", AggregateType: long, Payload: 1}, producer.FieldAggregateType, "more than 255"},
		{"invalid raw json", producer.Message{Topic: "t", Payload: json.RawMessage(`{"a":`)}, producer.FieldPayload, "not valid JSON"},
		{"invalid bytes", producer.Message{Topic: "t", Payload: []byte(`nope`)}, producer.FieldPayload, "not valid JSON"},
		{"nil payload", producer.Message{Topic: "t"}, producer.FieldPayload, "is required"},
		{"unmarshalable payload", producer.Message{Topic: "t", Payload: make(chan int)}, producer.FieldPayload, "cannot be marshalled"},
		{"empty header name", producer.Message{Topic: "t", Payload: 1, Headers: map[string]string{"": "x"}}, producer.FieldHeaders, "empty header name"},
		{"reserved header", producer.Message{Topic: "t", Payload: 1, Headers: map[string]string{"nats-msg-id": "x"}}, `headers["nats-msg-id"]`, "set by the relay"},
		{"header line break", producer.Message{Topic: "t", Payload: 1, Headers: map[string]string{"X-A": "a\nb"}}, `headers["X-A"]`, "line break"},
		{"negative max attempts", producer.Message{Topic: "t", Payload: 1, MaxAttempts: -1}, producer.FieldMaxAttempts, "negative"},
		{"negative delay", producer.Message{Topic: "t", Payload: 1, Delay: -time.Second}, producer.FieldDelay, "negative"},
		{"bad id", producer.Message{ID: "order-1", Topic: "t", Payload: 1}, producer.FieldID, "not a UUID"},
		// Valid JSON that jsonb refuses: the INSERT would abort the caller's
		// transaction.
		{"NUL escape in raw json", producer.Message{Topic: "t", Payload: json.RawMessage(`{"a":"x\u0000y"}`)}, producer.FieldPayload, `\u0000`},
		{"NUL in a marshalled string", producer.Message{Topic: "t", Payload: map[string]string{"a": "x\x00y"}}, producer.FieldPayload, `\u0000`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The invalid message is the second one: the index must say so.
			// A nil transaction proves nothing reaches the database: the
			// validation error comes first.
			_, err := w.WritePgx(context.Background(), nilTx{}, ok, c.msg)
			var ve *producer.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want *ValidationError, got %T %v", err, err)
			}
			if ve.Index != 1 || ve.Field != c.field || !strings.Contains(ve.Reason, c.want) {
				t.Errorf("got index %d field %q reason %q; want index 1 field %q reason containing %q", ve.Index, ve.Field, ve.Reason, c.field, c.want)
			}
			if !strings.Contains(err.Error(), "message 1: "+c.field) {
				t.Errorf("message %q does not name the field", err)
			}
		})
	}

	t.Run("duplicate id and every error reported", func(t *testing.T) {
		id := uuid.NewString()
		_, err := w.WritePgx(context.Background(), nilTx{},
			producer.Message{ID: id, Topic: "t", Payload: 1},
			producer.Message{ID: strings.ToUpper(id), Topic: "", Payload: 1})
		if err == nil || !strings.Contains(err.Error(), "message 1: id: "+id+" is also the id of message 0") ||
			!strings.Contains(err.Error(), "message 1: topic: is required") {
			t.Errorf("got %v", err)
		}
	})

	t.Run("sqlserver counts UTF-16 code units", func(t *testing.T) {
		ws, err := producer.New(producer.WithDialect(producer.SQLServer))
		if err != nil {
			t.Fatal(err)
		}
		topic := strings.Repeat("😀", 128) // 128 characters, 256 UTF-16 units
		// A nil transaction: validation runs first, then the nil is refused.
		if _, err := w.WriteSQL(context.Background(), nil, producer.Message{Topic: topic, Payload: 1}); !errors.Is(err, producer.ErrNoTransaction) {
			t.Errorf("postgresql: want ErrNoTransaction after validation, got %v", err)
		}
		var ve *producer.ValidationError
		if _, err := ws.WriteSQL(context.Background(), nil, producer.Message{Topic: topic, Payload: 1}); !errors.As(err, &ve) || ve.Field != producer.FieldTopic {
			t.Errorf("sqlserver: want a topic ValidationError, got %v", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	if _, err := producer.New(producer.WithDialect("mysql")); err == nil {
		t.Error("mysql accepted")
	}
	if _, err := producer.New(producer.WithDialect(producer.SQLServer), producer.WithNotify("x")); err == nil {
		t.Error("notify on sqlserver accepted")
	}
	if _, err := producer.New(producer.WithTable("outbox", map[string]string{"topik": "t"}, nil)); err == nil || !strings.Contains(err.Error(), `unknown logical column "topik" (known: `) || !strings.Contains(err.Error(), ", topic, ") {
		t.Errorf("bad mapping: %v", err)
	}
}

// nilTx is a pgx.Tx that fails the test if the database is touched.
type nilTx struct{ pgx.Tx }

func (nilTx) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("the database was touched")
}

func TestSQLServerStatementGolden(t *testing.T) {
	m, err := dialect.NewMapping("sales.events", map[string]string{dialect.ColKey: "partition_key", dialect.ColPayload: "body"}, map[string]string{"pending": "NEW"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		opts []producer.Option
		max  bool
	}{
		{"sqlserver_insert.sql", []producer.Option{producer.WithDialect(producer.SQLServer)}, false},
		{"sqlserver_insert_max_attempts.sql", []producer.Option{producer.WithDialect(producer.SQLServer)}, true},
		{"sqlserver_insert_mapped.sql", []producer.Option{producer.WithDialect(producer.SQLServer), producer.WithMapping(m)}, false},
		{"postgresql_insert.sql", nil, false},
		{"postgresql_insert_notify_max_attempts.sql", []producer.Option{producer.WithNotify("queuebox")}, true},
		{"postgresql_insert_mapped.sql", []producer.Option{producer.WithMapping(m)}, false},
	} {
		w, err := producer.New(c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := w.Statement(c.max) + "\n"
		path := filepath.Join("testdata", c.file)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs:\n--- got\n%s--- want\n%s", c.file, got, want)
		}
	}
}

type row struct {
	ID            string
	Topic         string
	Key           *string
	Payload       string
	Headers       map[string]string
	AggregateType *string
	State         string
	Attempt       int
	MaxAttempts   int
	Sequence      int64
	Scheduled     time.Time
	Created       time.Time
}

func readRows(t *testing.T, ctx context.Context, conn interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []row {
	t.Helper()
	rs, err := conn.Query(ctx, `SELECT id::text, topic, key, payload::text, headers, aggregate_type, state, attempt, max_attempts, sequence, scheduled_at, created_at FROM outbox ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.ID, &r.Topic, &r.Key, &r.Payload, &r.Headers, &r.AggregateType, &r.State, &r.Attempt, &r.MaxAttempts, &r.Sequence, &r.Scheduled, &r.Created); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWritePgx(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	w, err := producer.New()
	if err != nil {
		t.Fatal(err)
	}
	callerID := "0190A5B8-0000-7000-8000-000000000001"
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	msgs := []producer.Message{
		{Topic: "order.created", Key: "o-1", Payload: map[string]any{"id": "o-1", "total": 42}, Headers: map[string]string{"X-Tenant": "acme"}, AggregateType: "order"},
		{ID: callerID, Topic: "order.paid", Key: "o-1", Payload: json.RawMessage(`{"id":"o-1","html":"<b>&</b>"}`)},
		{Topic: "order.reminder", Payload: []byte(`[1,2,3]`), Delay: time.Minute},
		{Topic: "order.archive", Payload: "plain string", ScheduledAt: at, MaxAttempts: 9},
		// A JSON null payload (docs/producing.md) is the JSON value null,
		// not an SQL NULL: the INSERT used to fail on the NOT NULL column and
		// abort the caller's transaction.
		{Topic: "order.none", Payload: json.RawMessage("null")},
		{Topic: "order.empty", Payload: []int(nil)},
	}
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.WritePgx(ctx, tx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if len(ids) != len(msgs) {
		t.Fatalf("%d ids for %d messages", len(ids), len(msgs))
	}
	if ids[1] != strings.ToLower(callerID) {
		t.Errorf("caller id: got %s", ids[1])
	}
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("id %d %q: %v", i, id, err)
		}
		if i != 1 && u.Version() != 7 {
			t.Errorf("id %d is version %d, want 7", i, u.Version())
		}
	}

	rows := readRows(t, ctx, pg.Pool)
	if len(rows) != len(msgs) {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		if r.ID != ids[i] {
			t.Errorf("row %d (by sequence) has id %s, want %s: sequence does not follow call order", i, r.ID, ids[i])
		}
		if r.State != "pending" || r.Attempt != 0 {
			t.Errorf("row %d: state %s attempt %d", i, r.State, r.Attempt)
		}
		if r.Topic != msgs[i].Topic {
			t.Errorf("row %d: topic %s", i, r.Topic)
		}
		if i > 0 && r.Sequence <= rows[i-1].Sequence {
			t.Errorf("row %d: sequence %d not increasing", i, r.Sequence)
		}
	}
	r0 := rows[0]
	if r0.Key == nil || *r0.Key != "o-1" || r0.AggregateType == nil || *r0.AggregateType != "order" ||
		r0.Headers["X-Tenant"] != "acme" || r0.Payload != `{"id": "o-1", "total": 42}` || r0.MaxAttempts != 5 || !r0.Scheduled.Equal(now) {
		t.Errorf("row 0: %+v (tx now %s)", r0, now)
	}
	if rows[1].Payload != `{"id": "o-1", "html": "<b>&</b>"}` {
		t.Errorf("row 1 payload %s", rows[1].Payload)
	}
	if rows[2].Key != nil || rows[2].AggregateType != nil || len(rows[2].Headers) != 0 || rows[2].Payload != "[1, 2, 3]" || !rows[2].Scheduled.Equal(now.Add(time.Minute)) {
		t.Errorf("row 2: %+v", rows[2])
	}
	if rows[3].Payload != `"plain string"` || rows[3].MaxAttempts != 9 || !rows[3].Scheduled.Equal(at) {
		t.Errorf("row 3: %+v, want scheduled %s", rows[3], at)
	}
	if rows[4].Payload != "null" || rows[5].Payload != "null" {
		t.Errorf("null payloads stored as %q and %q, want the JSON null", rows[4].Payload, rows[5].Payload)
	}
}

func TestWriteRollback(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	w, _ := producer.New()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WritePgx(ctx, tx, producer.Message{Topic: "a", Payload: 1}, producer.Message{Topic: "b", Payload: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if rows := readRows(t, ctx, pg.Pool); len(rows) != 0 {
		t.Errorf("rollback left %d rows", len(rows))
	}
}

// TestWriteSQLAndNotify plays the relay's side of wake on commit by hand:
// the listening session holds the notify lock exclusively while "asleep"
// (Listener.Arm), and the producer must notify then, and only then.
func TestWriteSQLAndNotify(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	channel := "qb_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]

	listener, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tryArm := func() bool {
		t.Helper()
		var ok bool
		if err := listener.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", postgres.NotifyLockClass, channel).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	quiet := func(what string) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if n, err := listener.WaitForNotification(short); err == nil {
			t.Errorf("%s: notification %+v", what, n)
		}
	}

	w, err := producer.New(producer.WithNotify(channel))
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pg.Pool)
	defer db.Close()

	// The relay sleeps: the producer notifies, at commit.
	if !tryArm() {
		t.Fatal("could not take the notify lock on an idle channel")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Mixed max attempts: three runs, three statements, three notify calls
	// folded into one notification by PostgreSQL.
	ids, err := w.WriteSQL(ctx, tx,
		producer.Message{Topic: "a", Payload: 1},
		producer.Message{Topic: "b", Payload: 2, MaxAttempts: 2},
		producer.Message{Topic: "c", Payload: 3})
	if err != nil {
		t.Fatal(err)
	}
	quiet("before commit")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification after commit: %v", err)
	}
	if n.Channel != channel || n.Payload != "" {
		t.Errorf("notification %+v", n)
	}
	quiet("second notification")

	// The relay is awake: no notification, but the open transaction keeps
	// a relay from going to sleep before it commits.
	if _, err := listener.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", postgres.NotifyLockClass, channel); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	more, err := w.WriteSQL(ctx, tx, producer.Message{Topic: "d", Payload: 4})
	if err != nil {
		t.Fatal(err)
	}
	if tryArm() {
		t.Error("a relay could go to sleep while a producer that did not notify was still open")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	quiet("awake relay")
	if !tryArm() {
		t.Error("the producer's lock outlived its transaction")
	}

	rows := readRows(t, ctx, pg.Pool)
	if len(rows) != 4 {
		t.Fatalf("%d rows", len(rows))
	}
	for i, want := range []int{5, 2, 5, 5} {
		if id := append(ids, more...)[i]; rows[i].ID != id || rows[i].MaxAttempts != want {
			t.Errorf("row %d: id %s max attempts %d; want %s %d", i, rows[i].ID, rows[i].MaxAttempts, id, want)
		}
	}
}

type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestTenThousandMessagesOneRoundTrip(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	cfg, err := pgx.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.Tracer = tracer
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	const n = 10_000
	msgs := make([]producer.Message, n)
	for i := range msgs {
		msgs[i] = producer.Message{
			Topic:   "order.created",
			Key:     "order-" + string(rune('a'+i%26)),
			Payload: map[string]any{"order": i, "total": 19.99, "currency": "EUR"},
			Headers: map[string]string{"X-Tenant": "acme"},
		}
	}
	w, _ := producer.New(producer.WithNotify("queuebox"))

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := tracer.n.Load()
	start := time.Now()
	ids, err := w.WritePgx(ctx, tx, msgs...)
	elapsed := time.Since(start)
	queries := tracer.n.Load() - before
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages: %d statement(s), %s in Write (validate + encode + insert + notify), %s per message",
		n, queries, elapsed, elapsed/n)
	if queries > 3 {
		t.Errorf("%d statements for %d messages, want at most 3", queries, n)
	}
	if len(ids) != n {
		t.Fatalf("%d ids", len(ids))
	}
	var count int
	var ordered bool
	err = conn.QueryRow(ctx, `SELECT count(*), bool_and(ok) FROM (
		SELECT id = lead_id OR lead_id IS NULL AS ok FROM (
			SELECT id, lead(id) OVER (ORDER BY sequence) AS lead_id FROM outbox) x
		) y`).Scan(&count, &ordered)
	if err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Errorf("%d rows", count)
	}
	// UUIDv7 ids generated in order sort in sequence order.
	var inversions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY sequence) AS prev FROM outbox) x WHERE prev > id`).Scan(&inversions); err != nil {
		t.Fatal(err)
	}
	if inversions != 0 {
		t.Errorf("%d ids out of sequence order", inversions)
	}
}

// TestWriteToATableWithoutOptionalColumns: an adopted table may lack key,
// headers, aggregateType, scheduledAt and maxAttempts (docs/adopting.md).
// The writer leaves them out of the insert (New used to fail: "column
// \"aggregateType\" is not mapped"), and refuses, before touching the
// database, a message that sets one of them.
func TestWriteToATableWithoutOptionalColumns(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	ctx := testenv.Context(t, 30*time.Second)
	pg.MustExec(t, ctx, `CREATE TABLE events (
		id uuid PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL,
		state text NOT NULL DEFAULT 'pending', seq bigserial NOT NULL)`)
	absent := map[string]string{"key": "", "headers": "", "aggregateType": "", "scheduledAt": "", "maxAttempts": "", "sequence": "seq"}
	w, err := producer.New(producer.WithTable("events", absent, nil))
	if err != nil {
		t.Fatalf("New on a table without the optional columns: %v", err)
	}
	write := func(msgs ...producer.Message) error {
		tx, err := pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := w.WritePgx(ctx, tx, msgs...); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := write(producer.Message{Topic: "a", Payload: 1}, producer.Message{Topic: "b", Payload: map[string]int{"n": 2}}); err != nil {
		t.Fatalf("Write of plain messages: %v", err)
	}
	err = write(
		producer.Message{Topic: "c", Payload: 3, Key: "k"},
		producer.Message{Topic: "c", Payload: 3, Headers: map[string]string{"X-A": "1"}},
		producer.Message{Topic: "c", Payload: 3, AggregateType: "order"},
		producer.Message{Topic: "c", Payload: 3, Delay: time.Minute},
		producer.Message{Topic: "c", Payload: 3, MaxAttempts: 3},
	)
	var ve *producer.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Write of messages the table cannot store = %v, want a ValidationError", err)
	}
	for _, field := range []string{"message 0: key", "message 1: headers", "message 2: aggregateType", "message 3: delay", "message 4: maxAttempts"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error lacks %q: %v", field, err)
		}
	}
	var n int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("table holds %d rows, want the 2 plain messages", n)
	}
}
