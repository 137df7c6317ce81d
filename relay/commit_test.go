package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// TestLockModeReportsOnlyCommittedOutcomes: in lock mode a claim's
// outcomes count once its transaction commits; a claim whose Commit fails
// is reported released (its rows are back to pending), not sent.
func TestLockModeReportsOnlyCommittedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		commitErr error
		want      Outcome
	}{{nil, OutcomeSent}, {errors.New("connection lost"), OutcomeReleased}} {
		t.Run(string(tc.want), func(t *testing.T) {
			t.Parallel()
			db := &fakeDialect{batches: [][]outbox.Message{rows("d", "r", 2)}, commitErr: tc.commitErr}
			obs := newOutcomeCount()
			e := newTestEngine(t, lockMode{db}, map[string]destination.Destination{"d": acceptAll{}}, Options{Observer: obs, Lease: time.Second})
			stop := runEngine(t, e)
			testenv.Eventually(t, 5*time.Second, func() bool { return obs.total() >= 2 }, "the claim's outcomes were not reported")
			stop()
			if got := obs.snapshot(); got[tc.want] != 2 || len(got) != 1 {
				t.Fatalf("commit error %v: reported %v, want 2 rows %s", tc.commitErr, got, tc.want)
			}
			if s := db.state(); s.commits != 1 || len(s.completed) != 2 {
				t.Fatalf("%d commits after %d rows completed, want one commit of the claim's 2 rows", s.commits, len(s.completed))
			}
		})
	}
}

// partlyDown refuses message "b" (every message, with all) at the
// connection level and accepts the others: unless all, the destination is
// up and b's failure is its own.
type partlyDown struct{ all bool }

func (p partlyDown) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if p.all || strings.HasSuffix(m.ID, "b") {
			errs[i] = outbox.Unavailable(errors.New("403 forbidden"))
		}
	}
	return destination.NewBatchError(errs)
}
func (partlyDown) Close() error { return nil }

// partlyDownStream is partlyDown as a destination.Streamer that answers
// the messages in order: b's failure comes after a got through.
type partlyDownStream struct{ partlyDown }

func (p partlyDownStream) PublishEach(ctx context.Context, msgs []outbox.Message, done func(int, error)) {
	err := p.Publish(ctx, msgs)
	for i := range msgs {
		done(i, destination.ErrorAt(err, i))
	}
}

// TestOnlyAWholeDestinationFailureDefersRows: a connection-level failure
// of some messages while others of the same destination got through
// spends an attempt like any failure (else a row refused for ever would
// never die and would block its key); when every message failed that way
// the destination is down: no attempt is spent, the rows wait (deferred)
// and the circuit opens.
func TestOnlyAWholeDestinationFailureDefersRows(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, tc := range []struct {
			all         bool
			wantAttempt int
			wantCircuit BreakerState
		}{{false, 1, BreakerClosed}, {true, 0, BreakerOpen}} {
			t.Run(fmt.Sprintf("stream=%v/all=%v", stream, tc.all), func(t *testing.T) {
				t.Parallel()
				db := &fakeDialect{batches: [][]outbox.Message{{
					{ID: "a", Topic: "d", Key: "a", MaxAttempts: 5}, {ID: "b", Topic: "d", Key: "b", MaxAttempts: 5}}}}
				var dest destination.Destination = partlyDown{all: tc.all}
				if stream {
					dest = partlyDownStream{partlyDown{all: tc.all}}
				}
				obs := newOutcomeCount()
				e := newTestEngine(t, db, map[string]destination.Destination{"d": dest},
					Options{Lease: time.Second, Observer: obs, Breaker: BreakerOptions{Failures: 1, OpenFor: time.Minute}})
				stop := runEngine(t, e)
				testenv.Eventually(t, 5*time.Second, func() bool { return obs.total() >= 2 }, "the rows were not settled")
				circuit := e.Circuits()["d"]
				stop()
				s := db.state()
				b, ok := s.retryOf("b")
				if !ok || b.Attempt != tc.wantAttempt {
					t.Fatalf("whole destination down = %v: retry of b = %+v (%v), want attempt %d", tc.all, b, ok, tc.wantAttempt)
				}
				if circuit != tc.wantCircuit {
					t.Errorf("whole destination down = %v: circuit %v, want %v", tc.all, circuit, tc.wantCircuit)
				}
				if tc.all {
					a, _ := s.retryOf("a")
					if a.Attempt != 0 || a.Delay <= 0 || obs.of("d", OutcomeDeferred) != 2 {
						t.Errorf("destination down: retry of a %+v, %d rows deferred; want both deferred with a delay and no attempt spent", a, obs.of("d", OutcomeDeferred))
					}
				} else if len(s.completed) != 1 || s.completed[0] != "a" {
					t.Errorf("completed %v, want a", s.completed)
				}
			})
		}
	}
}

// TestSkippedPollIsAnEmptyClaim: a poll that finds the claim turn busy
// (dialect.ErrClaimTurnBusy) is an empty claim, not a failed one: no
// error is logged or observed, and the engine falls idle as after any
// claim that found nothing (it arms the wake, which a failed claim does
// not). Only claims after an empty one are polls.
func TestSkippedPollIsAnEmptyClaim(t *testing.T) {
	t.Parallel()
	var polls, claims, arms atomic.Int64
	db := &fakeDialect{}
	db.claimFn = func(p dialect.ClaimParams) ([]outbox.Message, error) {
		if p.Poll {
			polls.Add(1)
			return nil, dialect.ErrClaimTurnBusy
		}
		claims.Add(1)
		return nil, nil
	}
	var logs testenv.LogBuffer
	obs := &claimErrors{}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": acceptAll{}}, Options{
		BatchSize: 10, PollInterval: 5 * time.Millisecond, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Wake:   make(chan struct{}),
		Arm: func(context.Context) (Arming, error) {
			arms.Add(1)
			return ArmUnavailable, nil
		},
	})
	stop := runEngine(t, e)
	idle := func() bool { return polls.Load() >= 3 && arms.Load() >= polls.Load()+1 }
	deadline := time.Now().Add(5 * time.Second)
	for !idle() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if p, a := polls.Load(), arms.Load(); p < 3 || a < p {
		t.Fatalf("%d skipped polls and %d armings; want the engine fallen idle (armed) after each skipped poll", p, a)
	}
	if n := claims.Load(); n != 1 {
		t.Errorf("%d claims were not polls, want only the first (every later one follows an empty claim)", n)
	}
	if n := obs.failed.Load(); n != 0 {
		t.Errorf("%d claims observed as failed, want none", n)
	}
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "claim failed") {
			t.Errorf("a skipped poll logged %q", l)
		}
	}
}

// claimErrors is an Observer that counts the claims reported failed.
type claimErrors struct {
	NopObserver
	failed atomic.Int64
}

func (c *claimErrors) Claimed(_, _ int, _ time.Duration, err error) {
	if err != nil {
		c.failed.Add(1)
	}
}

// TestDestinationDownDoesNotSpinWithoutScheduledAt: with the destination
// down and a table that cannot hold deferred rows back (no scheduledAt: a
// deferred row is due again at once, so every claim returns it), the
// claimer pauses between claims instead of claiming the same rows again at
// once (before the pause: thousands of claims a second for the whole
// outage).
func TestDestinationDownDoesNotSpinWithoutScheduledAt(t *testing.T) {
	t.Parallel()
	db := &fakeDialect{}
	db.claimFn = func(p dialect.ClaimParams) ([]outbox.Message, error) { return rows("d", "r", 1), nil }
	e := newTestEngine(t, db, map[string]destination.Destination{"d": partlyDown{all: true}},
		Options{BatchSize: 10, Lease: time.Second, PollInterval: 20 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = e.Run(ctx)
	// The circuit opens after five publishes, then a pause of 100ms after
	// each claim: about ten claims in 500ms.
	if n := db.state().claims; n < 2 || n > 30 {
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

// TestLeaseLostStopsThePublish: when a renewal finds none of the claim's
// rows still held (they were reclaimed after the lease expired), the
// publish stops: another relay delivers them, and publishing on would send
// them again, possibly after that relay sent the key's next row. The row
// is released, not retried.
func TestLeaseLostStopsThePublish(t *testing.T) {
	t.Parallel()
	db := &fakeDialect{batches: [][]outbox.Message{rows("d", "a", 1)}, renewFn: func() (int64, error) { return 0, nil }}
	dest := blockUntilDone{ended: make(chan struct{})}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{Lease: 300 * time.Millisecond})
	runEngine(t, e)
	select {
	case <-dest.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the publish went on after the renewal found the lease lost")
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().released) == 1 }, "the row was not released")
	if s := db.state(); len(s.retries) != 0 || len(s.completed) != 0 {
		t.Errorf("retried %v, completed %v; want the row only released", s.retries, s.completed)
	}
}

// TestCircuitOpenReasonNamesTheDestinationOnce: the last_error of a row
// deferred by an open circuit read "destination hooks: destination hooks:
// circuit open ...".
func TestCircuitOpenReasonNamesTheDestinationOnce(t *testing.T) {
	e, err := New(&fakeDialect{}, byTopic{}, map[string]destination.Destination{"hooks": acceptAll{}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// As the lane defers a row while the circuit is open (deferRows).
	open := outbox.RetryAfter(newBreaker(e.opt.Breaker).reason(), time.Second)
	got := e.reason(&outcome{msg: &outbox.Message{ID: "a"}, dest: "hooks", err: open})
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
