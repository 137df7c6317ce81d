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
	arm := func(ctx context.Context) (bool, error) {
		if arms.Add(1) > 1 {
			return false, nil // armed already: sleep
		}
		_, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`)
		if err != nil {
			t.Error(err)
		}
		return err == nil, nil
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
