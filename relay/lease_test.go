package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	httpdest "github.com/queuebox/queuebox/destination/http"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
)

// unrenewable is a relay's view of a database it cannot reach to renew
// (a partition between it and PostgreSQL, while other relays reach it):
// every renewal fails; the other statements go through.
type unrenewable struct{ dialect.Dialect }

func (unrenewable) Renew(context.Context, dialect.RenewParams) (int64, error) {
	return 0, errors.New("renew: connection refused (test)")
}

// TestUnrenewableRelayStopsBeforeAnotherDeliversTheKey: on PostgreSQL and
// a real HTTP receiver, relay A claims rows and cannot renew its lease;
// its publish is slow (the receiver holds the first request 2.5 s, and A
// sends one request at a time), so the keyed row waits behind it. Relay B
// reaps the expired lease, delivers the keyed row and the key's next row.
// A must not deliver its copy of the first row after the second arrived:
// it stops its publish before its lease expires (and, as it can still
// release, returns the rows, which either relay then delivers in order).
func TestUnrenewableRelayStopsBeforeAnotherDeliversTheKey(t *testing.T) {
	t.Parallel()
	orderHeldWhileARelayLosesItsClaim(t, 900*time.Millisecond, 2500*time.Millisecond, func(pg *testenv.PG, stuck bool) dialect.Dialect {
		db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
		if err != nil {
			t.Fatal(err)
		}
		if stuck {
			return unrenewable{db}
		}
		return db
	})
}

// TestLockTimeoutStopsThePublish is the same scenario in lock mode: relay
// A's claim holds its rows locked, and its lock timeout (1.2 s, under the
// 3 s lease) rolls the claim back while A still publishes (the receiver
// holds u1 1.5 s); relay B then claims the rows and delivers the key's two
// rows. A stops its publish before its lock timeout
// (dialect.BatchDeadliner), so that it does not send k's r1 after B's r2.
func TestLockTimeoutStopsThePublish(t *testing.T) {
	t.Parallel()
	orderHeldWhileARelayLosesItsClaim(t, 3*time.Second, 1500*time.Millisecond, func(pg *testenv.PG, _ bool) dialect.Dialect {
		db, err := postgres.NewLockMode(pg.Pool, dialect.DefaultMapping(), 1200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

// orderHeldWhileARelayLosesItsClaim runs relay A (dialectFor(pg, true)),
// one request at a time to a receiver that holds its first request for
// hold, then relay B (dialectFor(pg, false)), both with lease, and checks
// that the key's first row never arrives after its second.
func orderHeldWhileARelayLosesItsClaim(t *testing.T, lease, hold time.Duration, dialectFor func(pg *testenv.PG, stuck bool) dialect.Dialect) {
	t.Helper()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	type hit struct{ topic, relay string }
	var (
		mu   sync.Mutex
		hits []hit
		slow atomic.Bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Topic") == "u1" && slow.CompareAndSwap(false, true) {
			// The receiver is slow with this request, whatever the
			// client does meanwhile.
			<-time.After(hold)
		}
		mu.Lock()
		hits = append(hits, hit{r.Header.Get("X-Topic"), r.Header.Get("X-Relay")})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	// u1 first (no key), then k's two rows.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('u1', NULL, '{}')`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('r1', 'k', '{}')`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('r2', 'k', '{}')`)
	start := func(name string, stuck bool, concurrency int) func() {
		d := dialectFor(pg, stuck)
		h, err := httpdest.New(ctx, httpdest.Options{Name: "hooks", URL: srv.URL + "/{{ topic }}", Timeout: 10 * time.Second,
			Concurrency: concurrency, Headers: map[string]string{"X-Relay": name}}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		r, err := router.New([]router.RouteSpec{{Pattern: "**", Destination: "hooks"}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := relay.New(d, r, map[string]destination.Destination{"hooks": h}, relay.Options{
			BatchSize: 10, Lease: lease, ReapInterval: 100 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = e.Run(c); close(done) }()
		stop := sync.OnceFunc(func() { cancel(); <-done })
		t.Cleanup(stop)
		return stop
	}
	stopA := start("A", true, 1)
	// A claims u1 and r1 (r2 is not k's head yet), and the receiver holds
	// u1.
	testenv.Eventually(t, 5*time.Second, func() bool { return slow.Load() }, "relay A did not publish u1")
	stopB := start("B", false, 8)
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&n)
		return n == 3
	}, "the rows were not all sent")
	// A's Run returns once its publishes have: a copy A would send after
	// its slow request (within its shutdown window) has arrived by then.
	stopB()
	stopA()

	mu.Lock()
	defer mu.Unlock()
	r2At := -1
	for i, h := range hits {
		if h.topic == "r2" && r2At < 0 {
			r2At = i
		}
		if h.topic == "r1" && r2At >= 0 {
			t.Fatalf("the receiver got k's r1 (from relay %s) after its r2: %v", h.relay, hits)
		}
	}
	if r2At < 0 {
		t.Fatalf("r2 never arrived: %v", hits)
	}
}
