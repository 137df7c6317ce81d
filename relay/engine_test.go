package relay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/destination"
	httpdest "github.com/queuebox/queuebox/destination/http"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
)

// recorder is a relay.Observer that remembers breaker transitions and
// commit-to-ack durations.
type recorder struct {
	relay.NopObserver
	breakers guardedList[relay.BreakerState]
	acks     guardedList[time.Duration]
}

func (r *recorder) BreakerChanged(_ string, to relay.BreakerState) { r.breakers.add(to) }
func (r *recorder) Acked(_ string, d time.Duration)                { r.acks.add(d) }
func (r *recorder) transitions() []relay.BreakerState              { return r.breakers.snapshot() }
func (r *recorder) observedAcks() []time.Duration                  { return r.acks.snapshot() }

// guardedList is a list that the engine's goroutines append to while the
// test reads it.
type guardedList[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *guardedList[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
}

func (l *guardedList[T]) snapshot() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

func startEngine(t *testing.T, pg *testenv.PG, hookURL string, routes []router.RouteSpec, opt relay.Options) context.CancelFunc {
	t.Helper()
	return startEngineWrapped(t, pg, nil, hookURL, routes, opt)
}

// startEngineWrapped is startEngine with the PostgreSQL dialect wrapped by
// wrap (when not nil), to stage a database fault.
func startEngineWrapped(t *testing.T, pg *testenv.PG, wrap func(dialect.Dialect) dialect.Dialect, hookURL string, routes []router.RouteSpec, opt relay.Options) context.CancelFunc {
	t.Helper()
	var db dialect.Dialect
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		db = wrap(db)
	}
	hooks, err := httpdest.New(context.Background(), httpdest.Options{Name: "hooks", URL: hookURL + "/{{ topic }}", Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Close() })
	if routes == nil {
		routes = []router.RouteSpec{{Pattern: "hook.**", Destination: "hooks"}}
	}
	r, err := router.New(routes)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e, err := relay.New(db, r, map[string]destination.Destination{"hooks": hooks}, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = e.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel
}

func insertRows(t *testing.T, pool *pgxpool.Pool, n int, topic string, maxAttempts int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO outbox (topic, key, payload, max_attempts)
		SELECT $1, 'k' || (i % 10), json_build_object('i', i), $3 FROM generate_series(1, $2) i`, topic, n, maxAttempts)
	if err != nil {
		t.Fatal(err)
	}
}

type rowSummary struct {
	state      string
	n          int
	maxAttempt int
	lastError  string
}

func summary(t *testing.T, pool *pgxpool.Pool) map[string]rowSummary {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT state, count(*), max(attempt), coalesce(max(last_error), '') FROM outbox GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]rowSummary{}
	for rows.Next() {
		var s rowSummary
		if err := rows.Scan(&s.state, &s.n, &s.maxAttempt, &s.lastError); err != nil {
			t.Fatal(err)
		}
		out[s.state] = s
	}
	return out
}

// TestDestinationDownSpendsNoAttempts: while the receiver refuses
// connections the circuit opens and rows wait without spending attempts;
// none goes dead even with max_attempts 3 and a fast backoff; once the
// receiver is back every row is delivered and the circuit closes.
func TestDestinationDownSpendsNoAttempts(t *testing.T) {
	pg := testenv.Postgres(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused

	insertRows(t, pg.Pool, 50, "hook.created", 3)
	obs := &recorder{}
	startEngine(t, pg, "http://"+addr, nil, relay.Options{
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
		Backoff:  relay.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Breaker:  relay.BreakerOptions{Failures: 3, OpenFor: 100 * time.Millisecond, MaxOpenFor: 400 * time.Millisecond},
		Observer: obs,
	})

	// Far more failed rounds than max_attempts would allow.
	testenv.Eventually(t, 20*time.Second, func() bool {
		tr := obs.transitions()
		opens := 0
		for _, s := range tr {
			if s == relay.BreakerOpen {
				opens++
			}
		}
		return opens >= 3
	}, "the circuit did not open and stay open across probes")
	s := summary(t, pg.Pool)
	if s["dead"].n != 0 || s["sent"].n != 0 {
		t.Fatalf("while the destination is down: %+v; want no dead and no sent rows", s)
	}
	var maxAttempt int
	var lastErr string
	if err := pg.Pool.QueryRow(context.Background(),
		`SELECT max(attempt), coalesce(max(last_error), '') FROM outbox`).Scan(&maxAttempt, &lastErr); err != nil {
		t.Fatal(err)
	}
	if maxAttempt != 0 {
		t.Fatalf("attempts were spent while the destination was down: max attempt %d", maxAttempt)
	}
	if !strings.Contains(lastErr, "connect") && !strings.Contains(lastErr, "circuit open") {
		t.Fatalf("last_error does not say why the rows wait: %q", lastErr)
	}

	var got atomic.Int64
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("re-listen on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	testenv.Eventually(t, 20*time.Second, func() bool { return summary(t, pg.Pool)["sent"].n == 50 }, "rows not delivered after the receiver came back")
	tr := obs.transitions()
	if tr[len(tr)-1] != relay.BreakerClosed {
		t.Fatalf("circuit transitions %v: want it closed at the end", tr)
	}
	if got.Load() != 50 {
		t.Fatalf("receiver got %d requests, want 50", got.Load())
	}
}

// TestFailuresRetryThenDie: a receiver answering 500 spends attempts with
// backoff until max_attempts, then the row is dead with the status kept; a
// topic that matches no route is dead at once with the reason.
func TestFailuresRetryThenDie(t *testing.T) {
	pg := testenv.Postgres(t)
	var calls atomic.Int64
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "database password=hunter2 exploded", http.StatusInternalServerError)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	insertRows(t, pg.Pool, 5, "hook.created", 3)
	insertRows(t, pg.Pool, 2, "nowhere.created", 5)
	startEngine(t, pg, "http://"+ln.Addr().String(), nil, relay.Options{
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		Backoff: relay.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	testenv.Eventually(t, 20*time.Second, func() bool { return summary(t, pg.Pool)["dead"].n == 7 }, "rows did not all go dead")

	rows, err := pg.Pool.Query(context.Background(), `SELECT topic, attempt, last_error FROM outbox ORDER BY topic`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic, lastErr string
		var attempt int
		if err := rows.Scan(&topic, &attempt, &lastErr); err != nil {
			t.Fatal(err)
		}
		switch topic {
		case "hook.created":
			if attempt != 3 || !strings.Contains(lastErr, "500") {
				t.Errorf("hook row: attempt %d, last_error %q; want 3 and the status", attempt, lastErr)
			}
			if strings.Contains(lastErr, "hunter2") {
				t.Errorf("last_error leaks a secret from the response body: %q", lastErr)
			}
		case "nowhere.created":
			if attempt != 1 || !strings.Contains(lastErr, `no route matches topic "nowhere.created"`) {
				t.Errorf("unrouted row: attempt %d, last_error %q", attempt, lastErr)
			}
		}
	}
	if c := calls.Load(); c != 15 {
		t.Fatalf("receiver saw %d requests, want 5 rows x 3 attempts = 15", c)
	}
}

// TestRowWithoutCreatedAtIsDeliveredNotTimed: a row whose created_at is
// NULL (an adopted table) is delivered, but gives the commit-to-ack
// histogram no observation: measured from the zero time it would read
// two thousand years.
func TestRowWithoutCreatedAtIsDeliveredNotTimed(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN created_at DROP NOT NULL`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, created_at)
		VALUES ('hook.timed', 'k1', '{}', now()), ('hook.untimed', 'k2', '{}', NULL)`)
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	obs := &recorder{}
	startEngine(t, pg, srv.URL, nil, relay.Options{PollInterval: 10 * time.Millisecond,
		MaxPollInterval: 50 * time.Millisecond, Observer: obs})
	for summary(t, pg.Pool)["sent"].n < 2 {
		if ctx.Err() != nil {
			t.Fatalf("rows not sent: %+v", summary(t, pg.Pool))
		}
		time.Sleep(20 * time.Millisecond)
	}
	acks := obs.observedAcks()
	if received.Load() != 2 || len(acks) != 1 || acks[0] < 0 || acks[0] > time.Minute {
		t.Fatalf("received %d, observed %v: want 2 received and one observation under a minute", received.Load(), acks)
	}
}

// refuseUpdates installs, on the test's outbox table, a trigger that raises
// an exception (SQLSTATE P0001) with message, a RAISE format and its
// arguments, for every update whose new row satisfies cond: the refusal of
// an adopted table's trigger.
func refuseUpdates(t *testing.T, pg *testenv.PG, cond, message string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pg.Pool.Exec(ctx, `CREATE FUNCTION refuse_updates() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF `+cond+` THEN
				RAISE EXCEPTION `+message+`;
			END IF;
			RETURN NEW;
		END $$`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pg.Pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS refuse_updates() CASCADE`) })
	if _, err := pg.Pool.Exec(ctx, `CREATE TRIGGER refuse_updates BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_updates()`); err != nil {
		t.Fatal(err)
	}
}

// TestTableRefusingOneRowHoldsBackNoOther: a trigger of an adopted table
// refuses, for some rows, the update that marks them sent. The rest of the
// batch is settled all the same (the refused statement is narrowed down to
// those rows), and each refused row goes dead with the table's reason for
// it, which releases its key to the key's later row. Where the trigger
// refuses the dead-lettering too, the row stays processing and nothing else
// waits on it but its own key.
func TestTableRefusingOneRowHoldsBackNoOther(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rows     []string // the rows (payload i) the trigger refuses
		refuse   string   // the states it refuses them
		want     map[string]int
		lastErr  string // of each refused row, beside its own reason
		requests int64
		outcomes map[relay.Outcome]int64 // as the observer counts them
	}{
		{"refuses sent", []string{"7"}, "('sent')", map[string]int{"sent": 19, "dead": 1}, "refused to mark the row sent", 20,
			map[relay.Outcome]int64{relay.OutcomeSent: 19, relay.OutcomeDead: 1}},
		// Each refused row's last_error names that row, not the first one.
		{"refuses two rows sent", []string{"3", "7"}, "('sent')", map[string]int{"sent": 18, "dead": 2}, "refused to mark the row sent", 20,
			map[relay.Outcome]int64{relay.OutcomeSent: 18, relay.OutcomeDead: 2}},
		// Row 17 shares row 7's key and waits behind it.
		{"refuses sent and dead", []string{"7"}, "('sent', 'dead')", map[string]int{"sent": 18, "processing": 1, "pending": 1}, "", 19,
			map[relay.Outcome]int64{relay.OutcomeSent: 18}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := testenv.Postgres(t)
			ctx := context.Background()
			refuseUpdates(t, pg, `NEW.payload->>'i' IN ('`+strings.Join(tc.rows, "', '")+`') AND NEW.state IN `+tc.refuse,
				`'row % may not become %', NEW.payload->>'i', NEW.state`)
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(srv.Close)

			insertRows(t, pg.Pool, 20, "hook.created", 5)
			obs := newOutcomeCounter()
			startEngine(t, pg, srv.URL, nil, relay.Options{
				BatchSize: 100, Lease: 30 * time.Second, // no lease expires during the test
				PollInterval: 10 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
				Observer: obs,
			})
			var last map[string]rowSummary
			settled := func() bool {
				last = summary(t, pg.Pool)
				for state, n := range tc.want {
					if last[state].n != n {
						return false
					}
				}
				return true
			}
			for deadline := time.Now().Add(15 * time.Second); !settled(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("rows did not settle as %v within 15s: %v", tc.want, last)
				}
			}
			if got := requests.Load(); got != tc.requests {
				t.Errorf("receiver got %d requests, want %d", got, tc.requests)
			}
			// The second batch's outcomes are reported after its rows are
			// written: wait for them.
			var want int64
			for _, n := range tc.outcomes {
				want += n
			}
			testenv.Eventually(t, 5*time.Second, func() bool { return obs.total() == want }, "outcomes not reported")
			if got := obs.snapshot(); !maps.Equal(got, tc.outcomes) {
				t.Errorf("outcomes counted %v, want %v", got, tc.outcomes)
			}
			for _, i := range tc.rows {
				var state, lastErr string
				if err := pg.Pool.QueryRow(ctx, `SELECT state, coalesce(last_error, '') FROM outbox WHERE payload->>'i' = $1`, i).Scan(&state, &lastErr); err != nil {
					t.Fatal(err)
				}
				t.Logf("row %s: %s, last_error %q", i, state, lastErr)
				if tc.lastErr != "" && (!strings.Contains(lastErr, tc.lastErr) || !strings.Contains(lastErr, "row "+i+" may not become sent")) {
					t.Errorf("row %s: state %s, last_error %q; want the table's reason for this row", i, state, lastErr)
				}
			}
		})
	}
}

// outcomeCounter is a relay.Observer that counts settled rows by outcome,
// and settlement statements by kind.
type outcomeCounter struct {
	relay.NopObserver
	mu    sync.Mutex
	n     map[relay.Outcome]int64
	wrote map[string]int
}

func newOutcomeCounter() *outcomeCounter {
	return &outcomeCounter{n: map[relay.Outcome]int64{}, wrote: map[string]int{}}
}

func (c *outcomeCounter) Settled(_ string, o relay.Outcome, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n != 0 {
		c.n[o] += int64(n)
	}
}

func (c *outcomeCounter) Wrote(op string, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wrote[op]++
}

func (c *outcomeCounter) snapshot() map[relay.Outcome]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *outcomeCounter) total() (sum int64) {
	for _, n := range c.snapshot() {
		sum += n
	}
	return sum
}

func (c *outcomeCounter) statements(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wrote[op]
}

// TestTableRefusingEveryRowCostsBoundedStatements: a table that refuses to
// mark any row sent (a trigger) makes the narrowing-down give up after a
// bounded number of statements, not one per row of the batch.
func TestTableRefusingEveryRowCostsBoundedStatements(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	refuseUpdates(t, pg, `NEW.state = 'sent'`, `'no row may become sent'`)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, payload) SELECT 'hook.created', json_build_object('i', i) FROM generate_series(1, 500) i`); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	obs := newOutcomeCounter()
	startEngine(t, pg, srv.URL, nil, relay.Options{
		BatchSize: 500, MaxInflight: 500, Lease: 30 * time.Second,
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, Observer: obs,
	})
	// The rows narrowed down to one go dead; the rest wait for their lease.
	// The batch's outcomes are reported once its settlement is over.
	testenv.Eventually(t, 15*time.Second, func() bool { return obs.total() > 0 }, "no outcome reported")
	s := summary(t, pg.Pool)
	if s["dead"].n == 0 {
		t.Fatalf("rows %+v: no refused row went dead", s)
	}
	if s["sent"].n != 0 || s["dead"].n+s["processing"].n != 500 {
		t.Fatalf("rows %+v: want none sent, every row dead or processing", s)
	}
	// One statement for each group of answers written together (a few:
	// rows settle as they answer), and at most 64 more for the claim to
	// narrow them down.
	if n := obs.statements("complete"); n < 2 || n > 64+10 {
		t.Fatalf("%d complete statements for one claim of 500 refused rows; want the narrowing-down bounded (2..74)", n)
	}
	// The rows left processing were settled in no way: they count in no
	// outcome, and the dead ones count dead once.
	want := map[relay.Outcome]int64{relay.OutcomeDead: int64(s["dead"].n)}
	if got := obs.snapshot(); !maps.Equal(got, want) {
		t.Fatalf("outcomes counted %v, want %v: a row the relay gave up settling is counted in no outcome", got, want)
	}
	t.Logf("complete statements: %d, dead rows: %d", obs.statements("complete"), s["dead"].n)
}

// replyLost is a dialect whose first Complete commits but reports err, as
// when the server's reply never reached the relay.
type replyLost struct {
	dialect.Dialect
	err   error
	once  sync.Once
	first atomic.Int64 // rows of the completion whose reply was lost
}

func (d *replyLost) Complete(ctx context.Context, p dialect.CompleteParams) (int64, error) {
	n, err := d.Dialect.Complete(ctx, p)
	lost := false
	d.once.Do(func() { lost = true })
	if err == nil && lost {
		d.first.Store(n)
		return 0, d.err
	}
	return n, err
}

// lostCounter is a relay.Observer that counts lost claims and settled
// rows.
type lostCounter struct {
	relay.NopObserver
	lost, settled atomic.Int64
}

func (l *lostCounter) Lost(n int)                               { l.lost.Add(int64(n)) }
func (l *lostCounter) Settled(_ string, _ relay.Outcome, n int) { l.settled.Add(int64(n)) }

// TestSettleRetryAfterLostReply: a completion that committed but whose
// reply was lost (the dialect marks the error outbox.MaybeApplied) is
// retried; the retry changes nothing, because the rows are sent already.
// That is not a lost claim: the alert on queuebox_claims_lost_total must
// not fire for it. After a failure that surely did not apply (a deadlock,
// say), the rows a retry does not change were reclaimed, and are counted
// lost. (The dialect here applies the first attempt and reports such a
// failure all the same, to stage that case.)
func TestSettleRetryAfterLostReply(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		countedLost bool
	}{
		{"maybe applied", outbox.MaybeApplied(&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), false},
		{"surely not applied", errors.New("deadlock detected"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := testenv.Postgres(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
			t.Cleanup(srv.Close)
			insertRows(t, pg.Pool, 10, "hook.created", 5)
			obs := &lostCounter{}
			db := &replyLost{err: tc.err}
			startEngineWrapped(t, pg, func(d dialect.Dialect) dialect.Dialect { db.Dialect = d; return db }, srv.URL, nil, relay.Options{
				PollInterval: 10 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, Observer: obs,
			})
			// Settled is reported once the batch's settlement is over.
			testenv.Eventually(t, 10*time.Second, func() bool { return obs.settled.Load() == 10 }, "rows not settled")
			if s := summary(t, pg.Pool); s["sent"].n != 10 {
				t.Fatalf("rows %+v; want 10 sent", s)
			}
			// Rows settle as each answer comes: the first completion holds
			// the rows answered by then.
			want := int64(0)
			if tc.countedLost {
				want = db.first.Load()
			}
			if n := obs.lost.Load(); n != want || db.first.Load() == 0 {
				t.Fatalf("%d claims counted lost after a retried completion of %d rows whose first attempt had committed; want %d", n, db.first.Load(), want)
			}
		})
	}
}
