package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
)

// pollsSkip is a dialect whose polls always find the claim turn taken by
// another relay's claim, as polls may under claimTurns: table.
type pollsSkip struct{ dialect.Dialect }

func (d pollsSkip) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if p.Poll {
		return nil, dialect.ErrClaimTurnBusy
	}
	return d.Dialect.Claim(ctx, p)
}

// TestArmedWorkerClaimsOnceMoreBeforeSleeping: a producer that found the
// relay awake commits without notifying; if that commit lands between the
// last busy worker's empty claim and its arming, only a claim after the
// arming sees the row. Options.Arm plays that producer (it inserts the
// row, then reports a fresh arming). Polls are 30 s apart, no wake ever
// comes, and every poll skips (another relay holds the claim turn), so the
// row is delivered within the test only if the worker claims once more,
// and not as a poll, before it sleeps. Only the last worker to fall idle
// arms: two workers, two arming calls (one before the row, one after).
func TestArmedWorkerClaimsOnceMoreBeforeSleeping(t *testing.T) {
	pg := testenv.Postgres(t)
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
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
	e, dest := newSlowEngine(t, pollsSkip{db}, relay.Options{
		PollInterval: 30 * time.Second, MaxPollInterval: 30 * time.Second, InflightBatches: 2,
		Wake: make(chan struct{}), Arm: arm,
	})
	runEngine(t, e)
	testenv.Eventually(t, 10*time.Second, func() bool { return summary(t, pg.Pool)["sent"].n == 1 },
		"the row committed before the arming waits for the poll")
	if n := dest.sent.Load(); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
	// The worker arms again after the delivery (its next claim is empty)
	// and then sleeps: no busy loop on a relay that is armed already, and
	// no arming by the worker that fell idle first.
	testenv.Eventually(t, 10*time.Second, func() bool { return arms.Load() >= 2 }, "no arming after the delivery")
	time.Sleep(200 * time.Millisecond)
	if n := arms.Load(); n != 2 {
		t.Errorf("Arm called %d times, want 2", n)
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
// producers notify (ArmWatched), the worker sleeps MaxPollInterval at
// once instead of polling every PollInterval for the first second of
// quiet; a notification still wakes it at once. When the wake source is
// down (ArmUnavailable) it polls as it would without one.
func TestWatchedRelayPollsOnlyAsTheSafetyNet(t *testing.T) {
	pg := testenv.Postgres(t)
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	// Within a second of quiet, a worker without a wake source claims
	// every PollInterval (10 ms): about 80 times in the window.
	const window = 800 * time.Millisecond
	claims := func(answer relay.Arming) (n int64, wake chan struct{}, dest *slowDest) {
		counted := &countClaims{Dialect: db}
		wake = make(chan struct{}, 1)
		e, dest := newSlowEngine(t, counted, relay.Options{
			PollInterval: 10 * time.Millisecond, MaxPollInterval: time.Minute, InflightBatches: 2,
			Wake: wake,
			Arm:  func(context.Context) (relay.Arming, error) { return answer, nil },
		})
		runEngine(t, e)
		time.Sleep(window)
		return counted.n.Load(), wake, dest
	}

	watched, wake, dest := claims(relay.ArmWatched)
	// One claim per worker, and one more poll by worker 0 if it fell idle
	// first (it sleeps PollInterval when it is not the last).
	if watched > 4 {
		t.Errorf("watched: %d claims in %v of quiet, want at most 4 (the safety-net poll is a minute away)", watched, window)
	}
	if _, err := pg.Pool.Exec(context.Background(), `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`); err != nil {
		t.Fatal(err)
	}
	wake <- struct{}{}
	testenv.Eventually(t, 10*time.Second, func() bool { return dest.sent.Load() == 1 },
		"a watched relay did not claim when woken")

	unavailable, _, _ := claims(relay.ArmUnavailable)
	if unavailable < 10 {
		t.Errorf("wake source down: %d claims in %v of quiet, want the usual polls every 10ms (at least 10)", unavailable, window)
	}
}
