package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// lockDialect is the engine's view of a lock-mode dialect: writes are
// accepted, and Commit decides whether they count. The point of the test is
// the engine's reporting, not the database's behaviour (covered by
// dialecttest.RunLockMode).
type lockDialect struct {
	commitErr error
	msgs      []outbox.Message
	claimed   bool
	retries   []dialect.RetryItem
}

func (d *lockDialect) Claim(context.Context, dialect.ClaimParams) ([]outbox.Message, error) {
	if d.claimed {
		return nil, nil
	}
	d.claimed = true
	return d.msgs, nil
}
func (d *lockDialect) Renew(context.Context, dialect.RenewParams) (int64, error) { return 0, nil }
func (d *lockDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	return int64(len(p.IDs)), nil
}
func (d *lockDialect) Retry(_ context.Context, p dialect.RetryParams) (int64, error) {
	d.retries = append(d.retries, p.Items...)
	return int64(len(p.Items)), nil
}
func (d *lockDialect) Dead(_ context.Context, p dialect.DeadParams) (int64, error) {
	return int64(len(p.Items)), nil
}
func (d *lockDialect) Release(_ context.Context, p dialect.ReleaseParams) (int64, error) {
	return int64(len(p.IDs)), nil
}
func (d *lockDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}
func (d *lockDialect) Commit(context.Context, string) error { return d.commitErr }

type acceptAll struct{}

func (acceptAll) Publish(context.Context, []outbox.Message) error { return nil }
func (acceptAll) Close() error                                    { return nil }

type toDest struct{}

func (toDest) Route(*outbox.Message) (string, error) { return "d", nil }

type settledCounter struct {
	NopObserver
	mu  sync.Mutex
	got map[Outcome]int
}

func (c *settledCounter) Settled(_ string, o Outcome, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[o] += n
}

// TestLockModeReportsOnlyCommittedOutcomes: a batch whose transaction does
// not commit is reported released (its rows are back to pending), not sent.
func TestLockModeReportsOnlyCommittedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		commitErr error
		want      Outcome
	}{{nil, OutcomeSent}, {errors.New("connection lost"), OutcomeReleased}} {
		db := &lockDialect{commitErr: tc.commitErr, msgs: []outbox.Message{{ID: "a", Topic: "t"}, {ID: "b", Topic: "t"}}}
		obs := &settledCounter{got: map[Outcome]int{}}
		e, err := New(db, toDest{}, map[string]destination.Destination{"d": acceptAll{}}, Options{Observer: obs, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		n, _, _, err := e.runBatch(context.Background(), e.log, false)
		if err != nil || n != 2 {
			t.Fatalf("runBatch = %d, %v", n, err)
		}
		if obs.got[tc.want] != 2 || len(obs.got) != 1 {
			t.Fatalf("commit error %v: reported %v, want 2 rows %s", tc.commitErr, obs.got, tc.want)
		}
	}
}

// partlyDown refuses message "b" at the connection level and accepts the
// others: the destination is up, message b's failure is its own.
type partlyDown struct{ all bool }

func (p partlyDown) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if p.all || m.ID == "b" {
			errs[i] = outbox.Unavailable(errors.New("403 forbidden"))
		}
	}
	return destination.NewBatchError(errs)
}
func (partlyDown) Close() error { return nil }

// TestOnlyAWholeDestinationFailureDefersRows: a connection-level failure
// of some messages of a publish spends an attempt like any failure (else a
// row refused forever would never die and would block its key); when every
// message failed that way the destination is down and no attempt is spent.
func TestOnlyAWholeDestinationFailureDefersRows(t *testing.T) {
	for _, tc := range []struct {
		all         bool
		wantAttempt int
	}{{false, 1}, {true, 0}} {
		db := &lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", MaxAttempts: 5}, {ID: "b", Topic: "t", MaxAttempts: 5}}}
		e, err := New(db, toDest{}, map[string]destination.Destination{"d": partlyDown{all: tc.all}}, Options{Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := e.runBatch(context.Background(), e.log, false); err != nil {
			t.Fatal(err)
		}
		var b *dialect.RetryItem
		for i := range db.retries {
			if db.retries[i].ID == "b" {
				b = &db.retries[i]
			}
		}
		if b == nil || b.Attempt != tc.wantAttempt {
			t.Fatalf("whole destination down = %v: retry of b = %+v, want attempt %d", tc.all, b, tc.wantAttempt)
		}
	}
}

// busyTurnDialect reports the table's claim turn busy to every poll and
// counts what it was asked.
type busyTurnDialect struct {
	lockDialect
	polls, claims int
}

func (d *busyTurnDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if p.Poll {
		d.polls++
		return nil, dialect.ErrClaimTurnBusy
	}
	d.claims++
	return nil, nil
}

// TestSkippedPollIsAnEmptyClaim: a poll that finds the claim turn busy is
// an empty claim, not a failed one (no error, nothing learnt by the claim
// policy), and only claims after an empty one are polls.
func TestSkippedPollIsAnEmptyClaim(t *testing.T) {
	db := &busyTurnDialect{}
	e, err := New(db, toDest{}, map[string]destination.Destination{"d": acceptAll{}}, Options{BatchSize: 10, InflightBatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	n, full, _, err := e.runBatch(context.Background(), e.log, true)
	if n != 0 || full || err != nil {
		t.Fatalf("skipped poll: runBatch = %d, %v, %v; want an empty claim without error", n, full, err)
	}
	if db.polls != 1 || db.claims != 0 {
		t.Fatalf("a skipped poll led to %d polls and %d claims, want 1 and 0 (no full scan after it)", db.polls, db.claims)
	}
	// Not a poll: the windowed claim, then (it was empty and nothing is in
	// flight) the policy's unbounded one.
	if _, _, _, err := e.runBatch(context.Background(), e.log, false); err != nil {
		t.Fatal(err)
	}
	if db.polls != 1 || db.claims != 2 {
		t.Fatalf("%d polls and %d claims reached the dialect, want 1 and 2", db.polls, db.claims)
	}
	if e.policy.claimLimit() != 10 || !e.policy.wakeSiblings() {
		t.Fatal("a skipped poll changed the claim policy")
	}
}

// TestAllDeferredBatchPausesTheWorker: a batch whose every row was deferred
// (its destination down) makes the worker wait before its next claim; a
// batch with any row of its own failure, or delivered, does not.
func TestAllDeferredBatchPausesTheWorker(t *testing.T) {
	opt := Options{Lease: time.Second, PollInterval: 20 * time.Millisecond, MaxPollInterval: 300 * time.Millisecond}
	for _, tc := range []struct {
		all  bool
		want time.Duration
	}{{true, 300 * time.Millisecond}, {false, 0}} {
		db := &lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", MaxAttempts: 5}, {ID: "b", Topic: "t", MaxAttempts: 5}}}
		e, err := New(db, toDest{}, map[string]destination.Destination{"d": partlyDown{all: tc.all}}, opt)
		if err != nil {
			t.Fatal(err)
		}
		_, _, pause, err := e.runBatch(context.Background(), e.log, false)
		if err != nil {
			t.Fatal(err)
		}
		// Backoff.Base (1s) is the deferral; the pause is capped at
		// MaxPollInterval.
		if pause != tc.want {
			t.Errorf("every row deferred = %v: pause %v, want %v", tc.all, pause, tc.want)
		}
	}
	// A lock-mode batch whose commit failed is due again at once: pause.
	db := &lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t"}}, commitErr: errors.New("connection reset")}
	e, err := New(db, toDest{}, map[string]destination.Destination{"d": acceptAll{}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, pause, _ := e.runBatch(context.Background(), e.log, false); pause != 300*time.Millisecond {
		t.Errorf("failed commit: pause %v, want 300ms", pause)
	}
}

// sameRows is a table without a scheduledAt column: a deferred row is due
// again at once, so every claim returns it.
type sameRows struct {
	lockDialect
	claims atomic.Int64
}

func (d *sameRows) Claim(context.Context, dialect.ClaimParams) ([]outbox.Message, error) {
	d.claims.Add(1)
	return []outbox.Message{{ID: "a", Topic: "t", MaxAttempts: 5}}, nil
}
func (d *sameRows) Retry(_ context.Context, p dialect.RetryParams) (int64, error) {
	return int64(len(p.Items)), nil
}

type leaseMode struct{ dialect.Dialect } // hides lockDialect's Commit

// TestDestinationDownDoesNotSpinWithoutScheduledAt: with the destination
// down and a table that cannot hold deferred rows back, the workers pause
// between claims instead of claiming the same row again at once (before:
// thousands of claims a second for the whole outage).
func TestDestinationDownDoesNotSpinWithoutScheduledAt(t *testing.T) {
	db := &sameRows{}
	e, err := New(leaseMode{db}, toDest{}, map[string]destination.Destination{"d": partlyDown{all: true}},
		Options{Lease: time.Second, PollInterval: 20 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond, InflightBatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = e.Run(ctx)
	// Two workers, a pause of 100ms after each claim: about ten claims in
	// 500ms. Without the pause there were thousands.
	if n := db.claims.Load(); n < 2 || n > 30 {
		t.Errorf("%d claims in 500ms with the destination down, want 2 to 30", n)
	}
}

// blockUntilDone publishes nothing until its context ends, and records
// that it ended.
type blockUntilDone struct{ ended chan struct{} }

func (b blockUntilDone) Publish(ctx context.Context, _ []outbox.Message) error {
	select {
	case <-ctx.Done():
		close(b.ended)
		return ctx.Err()
	case <-time.After(10 * time.Second):
		return nil
	}
}
func (blockUntilDone) Close() error { return nil }

// TestLeaseLostStopsThePublish: when a renewal finds none of the batch's
// rows still held (they were reclaimed after the lease expired), the
// publish stops: another relay delivers them, and publishing on would send
// them again, possibly after that relay sent the key's next row.
func TestLeaseLostStopsThePublish(t *testing.T) {
	db := &lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}}}
	dest := blockUntilDone{ended: make(chan struct{})}
	e, err := New(leaseMode{db}, toDest{}, map[string]destination.Destination{"d": dest}, Options{Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _, _ = e.runBatch(context.Background(), e.log, false)
	}()
	select {
	case <-dest.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the publish went on after the renewal found the lease lost")
	}
	<-done
}

// TestCircuitOpenReasonNamesTheDestinationOnce: the last_error of a row
// deferred by an open circuit read "destination hooks: destination hooks:
// circuit open ...".
func TestCircuitOpenReasonNamesTheDestinationOnce(t *testing.T) {
	e, err := New(&lockDialect{}, toDest{}, map[string]destination.Destination{"hooks": acceptAll{}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := e.reason(&outcome{msg: &outbox.Message{ID: "a"}, dest: "hooks", err: circuitOpenError(time.Second)})
	if strings.Count(got, "destination hooks") != 1 || !strings.Contains(got, "circuit open") {
		t.Errorf("reason %q, want the destination named once and the circuit open", got)
	}
	// A destination's own error names it already: the relay does not
	// again (before: `destination hooks: http destination "hooks": POST
	// http://…`, all that dead list's 60 characters showed).
	own := errors.New(`http destination "hooks": 500 Internal Server Error from POST http://127.0.0.1/x`)
	if got := e.reason(&outcome{msg: &outbox.Message{ID: "a"}, dest: "hooks", err: own}); got != own.Error() {
		t.Errorf("reason %q, want the destination's error as it is: %q", got, own)
	}
	other := errors.New("connection reset")
	if got := e.reason(&outcome{msg: &outbox.Message{ID: "a"}, dest: "hooks", err: other}); got != "destination hooks: connection reset" {
		t.Errorf("reason %q, want the destination named", got)
	}
}
