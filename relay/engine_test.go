package relay_test

import (
	"context"
	"io"
	"log/slog"
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

type harness struct {
	pg  *testenv.PG
	url string // the hook URL
}

func startEngine(t *testing.T, pg *testenv.PG, hookURL string, routes []router.RouteSpec, opt relay.Options) context.CancelFunc {
	t.Helper()
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
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
