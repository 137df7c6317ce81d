package relay_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
)

// newSlowEngine returns an engine on db that routes every row to one
// slowDest, with opt and a silent logger.
func newSlowEngine(t *testing.T, db dialect.Dialect, opt relay.Options) (*relay.Engine, *slowDest) {
	t.Helper()
	dest := &slowDest{}
	r, err := router.New([]router.RouteSpec{{Pattern: "**", Destination: "slow"}})
	if err != nil {
		t.Fatal(err)
	}
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := relay.New(db, r, map[string]destination.Destination{"slow": dest}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e, dest
}

// runEngine runs e until the test ends.
func runEngine(t *testing.T, e *relay.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// slowDest acks every publish after 30 ms, and counts the rows.
type slowDest struct{ sent atomic.Int64 }

func (d *slowDest) Publish(ctx context.Context, msgs []outbox.Message) error {
	select {
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	d.sent.Add(int64(len(msgs)))
	return nil
}

func (d *slowDest) Close() error { return nil }

// pollsSkip is a dialect whose polls always find the claim turn taken by
// another relay's claim, as polls may under claimTurns: table. It counts
// the claims that reach it.
type pollsSkip struct {
	dialect.Dialect
	claims atomic.Int64
}

func (d *pollsSkip) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.claims.Add(1)
	if p.Poll {
		return nil, dialect.ErrClaimTurnBusy
	}
	return d.Dialect.Claim(ctx, p)
}

// TestArmedClaimerClaimsOnceMoreBeforeSleeping: a producer that found the
// relay awake commits without notifying; if that commit lands between the
// claimer's last empty claim and its arming, only a claim after the
// arming sees the row. Options.Arm plays that producer (it inserts the
// row, then reports a fresh arming). Polls are 30 s apart, no wake ever
// comes, and every poll skips (another relay holds the claim turn), so the
// row is delivered within the test only if the claimer claims once more,
// and not as a poll, before it sleeps. After the delivery it arms again
// (its next claim is empty), is told it is watched, and sleeps: two
// armings in all.
func TestArmedClaimerClaimsOnceMoreBeforeSleeping(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	base, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	db := &pollsSkip{Dialect: base}
	var arms atomic.Int64
	arm := func(ctx context.Context) (relay.Arming, error) {
		if arms.Add(1) > 1 {
			return relay.ArmWatched, nil // armed already: sleep
		}
		_, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`)
		if err != nil {
			t.Error(err)
			return relay.ArmUnavailable, nil
		}
		return relay.ArmFresh, nil
	}
	e, dest := newSlowEngine(t, db, relay.Options{
		PollInterval: 30 * time.Second, MaxPollInterval: 30 * time.Second,
		Wake: make(chan struct{}), Arm: arm,
	})
	runEngine(t, e)
	testenv.Eventually(t, 10*time.Second, func() bool { return summary(t, pg.Pool)["sent"].n == 1 },
		"the row committed before the arming waits for the poll")
	if n := dest.sent.Load(); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return arms.Load() >= 2 }, "no arming after the delivery")
	// Then the claimer sleeps: over a window of quiet, no busy loop of
	// claims or armings on a relay that is armed already.
	claims := db.claims.Load()
	time.Sleep(200 * time.Millisecond)
	if n := arms.Load(); n != 2 {
		t.Errorf("Arm called %d times, want 2", n)
	}
	if n := db.claims.Load(); n != claims {
		t.Errorf("%d claims while armed and watched, want none", n-claims)
	}
}

// countClaims counts the claims that reach the database.
type countClaims struct {
	dialect.Dialect
	n atomic.Int64
}

func (d *countClaims) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.n.Add(1)
	return d.Dialect.Claim(ctx, p)
}

// TestWatchedRelayPollsOnlyAsTheSafetyNet: once Arm reports that
// producers notify (ArmWatched), the claimer sleeps MaxPollInterval at
// once instead of polling every PollInterval for the first second of
// quiet; a notification still wakes it at once. When the wake source is
// down (ArmUnavailable) it polls as it would without one.
func TestWatchedRelayPollsOnlyAsTheSafetyNet(t *testing.T) {
	t.Parallel()
	start := func(answer relay.Arming) (*testenv.PG, *countClaims, chan struct{}, *slowDest) {
		pg := testenv.Postgres(t)
		db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
		if err != nil {
			t.Fatal(err)
		}
		counted := &countClaims{Dialect: db}
		wake := make(chan struct{}, 1)
		e, dest := newSlowEngine(t, counted, relay.Options{
			PollInterval: 10 * time.Millisecond, MaxPollInterval: time.Minute,
			Wake: wake,
			Arm:  func(context.Context) (relay.Arming, error) { return answer, nil },
		})
		runEngine(t, e)
		return pg, counted, wake, dest
	}
	pg, watched, wake, dest := start(relay.ArmWatched)
	// Within a second of quiet, a claimer without a wake source claims
	// every PollInterval (10 ms): at least 10 times in 800 ms. The relay
	// whose wake source is down does; the watched one, running since
	// before it, claimed once and sleeps (the safety-net poll is a minute
	// away).
	_, unavailable, _, _ := start(relay.ArmUnavailable)
	testenv.Eventually(t, 800*time.Millisecond, func() bool { return unavailable.n.Load() >= 10 },
		"wake source down: fewer than 10 claims in 800ms of quiet; want the usual polls every 10ms")
	if n := watched.n.Load(); n != 1 {
		t.Errorf("watched: %d claims while the relay whose wake source is down made %d, want 1", n, unavailable.n.Load())
	}
	if _, err := pg.Pool.Exec(context.Background(), `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`); err != nil {
		t.Fatal(err)
	}
	wake <- struct{}{}
	testenv.Eventually(t, 10*time.Second, func() bool { return dest.sent.Load() == 1 },
		"a watched relay did not claim when woken")
}
