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

// TestLockModeReachesRowsBeyondTheWindow: lock mode's claim honours the
// claim window (docs/claim.md, "Bounding the candidate scan"). When the
// window holds only rows of a key whose head is not due (a retry scheduled
// later), the windowed claim finds nothing and the engine's unbounded claim
// must still reach the ready heads beyond it: the window may delay rows,
// never strand them.
func TestLockModeReachesRowsBeyondTheWindow(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	db, err := postgres.NewLockMode(pg.Pool, dialect.DefaultMapping(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	// Key "slow": a head due in an hour, then 1,499 rows behind it, more
	// than the window of max(4 × 10, 1000) sequence numbers. Then five
	// ready heads of other keys.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, scheduled_at)
		VALUES ('window.slow', 'slow', '{}', now() + interval '1 hour')`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload)
		SELECT 'window.slow', 'slow', '{}' FROM generate_series(1, 1499)`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload)
		SELECT 'window.late', 'late-' || i, '{}' FROM generate_series(1, 5) i`)
	rec := &windowRecorder{LockDialect: db}
	e, dest := newSlowEngine(t, rec, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 20 * time.Millisecond,
		MaxPollInterval: 100 * time.Millisecond})
	runEngine(t, e)

	sent := func() int {
		var n int
		if err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for sent() < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := sent(); n != 5 {
		t.Fatalf("%d rows marked sent, want the 5 late heads beyond the window", n)
	}
	if n := dest.sent.Load(); n != 5 {
		t.Fatalf("%d rows published, want the 5 late heads and none of key slow", n)
	}
	// The rows came through the unbounded claim, after a windowed one
	// found nothing: the window bounded lock mode's scan.
	if w, u := rec.windowedEmpty.Load(), rec.unboundedRows.Load(); w == 0 || u != 5 {
		t.Fatalf("%d windowed claims found nothing and unbounded claims took %d rows; want at least 1 and 5", w, u)
	}
}

// windowRecorder is lock mode watched for what windowed and unbounded
// claims return.
type windowRecorder struct {
	*postgres.LockDialect
	windowedEmpty, unboundedRows atomic.Int64
}

func (r *windowRecorder) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	msgs, err := r.LockDialect.Claim(ctx, p)
	switch {
	case err != nil:
	case p.Window > 0 && len(msgs) == 0:
		r.windowedEmpty.Add(1)
	case p.Window == 0:
		r.unboundedRows.Add(int64(len(msgs)))
	}
	return msgs, err
}
