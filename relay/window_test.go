package relay_test

import (
	"context"
	"errors"
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
	seedBlockedWindow(t, ctx, pg)
	rec := &windowRecorder{Dialect: db}
	dest := newWindowEngine(t, &lockWindowRecorder{windowRecorder: rec, BatchCommitter: db})
	waitLateHeadsSent(t, pg, dest, time.Now().Add(20*time.Second))
	// The rows came through the unbounded claim, after a windowed one
	// found nothing: the window bounded lock mode's scan.
	if w, u := rec.windowedEmpty.Load(), rec.unboundedRows.Load(); w == 0 || u != 5 {
		t.Fatalf("%d windowed claims found nothing and unbounded claims took %d rows; want at least 1 and 5", w, u)
	}
}

// seedBlockedWindow inserts key "slow": a head due in an hour, then 1,499
// rows behind it, more than the window of max(4 × 10, 1000) sequence
// numbers of newWindowEngine's engine; then five ready heads of other keys
// (late-1 … late-5), beyond the window.
func seedBlockedWindow(t *testing.T, ctx context.Context, pg *testenv.PG) {
	t.Helper()
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, scheduled_at)
		VALUES ('window.slow', 'slow', '{}', now() + interval '1 hour')`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload)
		SELECT 'window.slow', 'slow', '{}' FROM generate_series(1, 1499)`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload)
		SELECT 'window.late', 'late-' || i, '{}' FROM generate_series(1, 5) i`)
}

// newWindowEngine runs an engine of batch 10 that polls often on db until
// the test ends, and returns its destination.
func newWindowEngine(t *testing.T, db dialect.Dialect) *slowDest {
	t.Helper()
	e, dest := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 20 * time.Millisecond,
		MaxPollInterval: 100 * time.Millisecond})
	runEngine(t, e)
	return dest
}

// waitLateHeadsSent waits until deadline for the five late heads of
// seedBlockedWindow to be marked sent, and checks that they, and nothing
// of key slow, were published.
func waitLateHeadsSent(t *testing.T, pg *testenv.PG, dest *slowDest, deadline time.Time) {
	t.Helper()
	sent := func() int {
		var n int
		if err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE state = 'sent' AND key LIKE 'late-%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for sent() < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := sent(); n != 5 {
		t.Fatalf("%d late heads marked sent, want the 5 beyond the window", n)
	}
	if n := dest.sent.Load(); n != 5 {
		t.Fatalf("%d rows published, want the 5 late heads and none of key slow", n)
	}
}

// windowCounts counts what windowed and unbounded claims return.
type windowCounts struct {
	windowedEmpty, unboundedClaims, unboundedRows atomic.Int64
	// unboundedAnyway counts unbounded claims that would run beside a
	// batch in flight in the window (no ClaimParams.IdleWindow, or one
	// other than the window of the claim before).
	unboundedAnyway atomic.Int64
	lastWindow      atomic.Int64 // Window of the last empty windowed claim
}

func (c *windowCounts) observe(p dialect.ClaimParams, msgs []outbox.Message, err error) {
	switch {
	case err != nil:
	case p.Window > 0 && len(msgs) == 0:
		c.windowedEmpty.Add(1)
		c.lastWindow.Store(int64(p.Window))
	case p.Window == 0:
		c.unboundedClaims.Add(1)
		c.unboundedRows.Add(int64(len(msgs)))
		if int64(p.IdleWindow) != c.lastWindow.Load() {
			c.unboundedAnyway.Add(1)
		}
	}
}

// windowRecorder is a dialect watched for what windowed and unbounded
// claims return.
type windowRecorder struct {
	dialect.Dialect
	windowCounts
}

func (r *windowRecorder) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	msgs, err := r.Dialect.Claim(ctx, p)
	r.observe(p, msgs, err)
	return msgs, err
}

// lockWindowRecorder is lock mode watched the same way: the engine must
// still see its Commit (dialect.BatchCommitter).
type lockWindowRecorder struct {
	*windowRecorder
	dialect.BatchCommitter
}

// TestUnboundedClaimWaitsForOtherRelaysBatches: when the window comes back
// empty while another relay has a batch in flight on the table, the
// engine's unbounded claim takes nothing (ClaimParams.IdleWindow): that batch
// explains the empty window, and its relay will find the rows behind it.
// Once no batch is in flight, the unbounded claim reaches the heads beyond
// the window (lesson 22 of docs/performance.md: three replicas at batch
// 1,000 each walked 50,000 rows for nothing, holding the table's claim
// turn).
func TestUnboundedClaimWaitsForOtherRelaysBatches(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	// Another relay holds one row of key "elsewhere", at the front, under
	// a lease of an hour. Behind it the window (max(4 × 10, 1000) sequence
	// numbers from the first due pending row) holds only key "slow": a
	// head due in an hour and 1,499 rows behind it. Five ready heads of
	// other keys lie beyond it.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, state, claim_token, claimed_at, lease_expires_at)
		VALUES ('window.held', 'elsewhere', '{}', 'processing', gen_random_uuid(), now(), now() + interval '1 hour')`)
	seedBlockedWindow(t, ctx, pg)
	rec := &windowRecorder{Dialect: db}
	dest := newWindowEngine(t, rec)

	// Windowed claims find nothing, and the unbounded claim takes nothing
	// while the other relay's batch is in flight: the late heads wait.
	deadline := time.Now().Add(20 * time.Second)
	for (rec.windowedEmpty.Load() < 5 || rec.unboundedClaims.Load() < 1) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w, u := rec.windowedEmpty.Load(), rec.unboundedClaims.Load(); w < 5 || u < 1 {
		t.Fatalf("%d windowed claims came back empty and %d unbounded claims ran, want at least 5 and 1", w, u)
	}
	if n := rec.unboundedRows.Load(); n != 0 {
		t.Fatalf("unbounded claims took %d rows while another relay had a batch in flight, want 0", n)
	}
	if n := rec.unboundedAnyway.Load(); n != 0 {
		t.Fatalf("%d unbounded claims were not made to wait for batches in flight in the window (ClaimParams.IdleWindow)", n)
	}

	// The other relay's batch is done: nothing explains the empty window
	// any more, and the unbounded claim reaches the five late heads.
	pg.MustExec(t, ctx, `UPDATE outbox SET state = 'sent', lease_expires_at = NULL WHERE key = 'elsewhere'`)
	waitLateHeadsSent(t, pg, dest, deadline)
	if c, r := rec.unboundedClaims.Load(), rec.unboundedRows.Load(); c == 0 || r != 5 {
		t.Fatalf("%d unbounded claims took %d rows; want at least 1, taking the 5 late heads", c, r)
	}
}

// failingUnbounded is a dialect whose unbounded claims fail (a statement
// timeout, say).
type failingUnbounded struct {
	dialect.Dialect
	unbounded atomic.Int64
}

func (f *failingUnbounded) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if p.Window == 0 {
		f.unbounded.Add(1)
		return nil, errors.New("canceling statement due to statement timeout")
	}
	return f.Dialect.Claim(ctx, p)
}

// TestFailedUnboundedClaimWaitsLikeABarrenOne: an unbounded claim that
// fails is put off like one that found nothing. Retried at every poll, a
// walk of the backlog that times out would hold the claim turn each time.
func TestFailedUnboundedClaimWaitsLikeABarrenOne(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	db, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	seedBlockedWindow(t, ctx, pg) // windowed claims find nothing
	f := &failingUnbounded{Dialect: db}
	newWindowEngine(t, f) // polls every 20–100 ms
	testenv.Eventually(t, 20*time.Second, func() bool { return f.unbounded.Load() > 0 }, "no unbounded claim ran")
	time.Sleep(1500 * time.Millisecond)
	// The backoff after the first (fullScanMinWait, 1 s, then 2 s) allows
	// one more in the 1.5 s after it.
	if n := f.unbounded.Load(); n > 2 {
		t.Fatalf("%d unbounded claims within 1.5 s of the first, each failing; want at most 2 (the full-scan backoff)", n)
	}
}
