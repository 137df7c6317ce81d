package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

func TestBreakerOpensAfterConsecutiveConnectionFailures(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(BreakerOptions{Failures: 3, OpenFor: time.Second, MaxOpenFor: 4 * time.Second})
	b.now = func() time.Time { return now }

	for i := 0; i < 2; i++ {
		if ok, _ := b.allow(); !ok {
			t.Fatalf("closed breaker refused publish %d", i)
		}
		if _, to := b.record(true); to != BreakerClosed {
			t.Fatalf("opened after %d failures, want 3", i+1)
		}
	}
	// A failure that is not connection-level resets the count.
	b.record(false)
	for i := 0; i < 3; i++ {
		b.allow()
		b.record(true)
	}
	if ok, wait := b.allow(); ok || wait != time.Second {
		t.Fatalf("after 3 failures: allow = %v, wait %v; want refused for 1s", ok, wait)
	}

	// After OpenFor, exactly one probe goes through.
	now = now.Add(time.Second)
	if ok, _ := b.allow(); !ok {
		t.Fatal("no probe allowed after OpenFor")
	}
	if ok, _ := b.allow(); ok {
		t.Fatal("a second concurrent probe was allowed")
	}
	// A failed probe doubles the open time, up to the cap.
	if _, to := b.record(true); to != BreakerOpen {
		t.Fatalf("failed probe left the breaker %v", to)
	}
	if _, wait := b.allow(); wait != 2*time.Second {
		t.Fatalf("open time after a failed probe = %v, want 2s", wait)
	}
	for _, want := range []time.Duration{4 * time.Second, 4 * time.Second} {
		now = now.Add(time.Hour)
		b.allow()
		b.record(true)
		if _, wait := b.allow(); wait != want {
			t.Fatalf("open time = %v, want %v (capped)", wait, want)
		}
	}
	// A successful probe closes it and resets the open time.
	now = now.Add(time.Hour)
	b.allow()
	if from, to := b.record(false); from != BreakerHalfOpen || to != BreakerClosed {
		t.Fatalf("successful probe: %v -> %v, want half-open -> closed", from, to)
	}
	for i := 0; i < 3; i++ {
		b.allow()
		b.record(true)
	}
	if _, wait := b.allow(); wait != time.Second {
		t.Fatalf("open time after recovery = %v, want the base 1s", wait)
	}
}

// answers is a destination whose publish answers each message with the
// error of its index.
type answers []error

func (a answers) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	copy(errs, a)
	return destination.NewBatchError(errs)
}
func (answers) Close() error { return nil }

// TestOnlyAWholeDestinationDownCountsForTheBreaker: a publish counts as
// the destination down (toward opening its circuit) only when every
// message failed at the connection level; one accepted message, or one
// refused otherwise (the destination answered), says it is up.
func TestOnlyAWholeDestinationDownCountsForTheBreaker(t *testing.T) {
	down := outbox.Unavailable(errors.New("connection refused"))
	other := errors.New("500")
	for i, c := range []struct {
		errs []error
		want BreakerState
	}{
		{[]error{nil}, BreakerClosed},
		{[]error{down, down}, BreakerOpen},
		{[]error{down, nil}, BreakerClosed},
		{[]error{down, other}, BreakerClosed},
		{[]error{outbox.Permanent(down)}, BreakerOpen},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e, err := New(&fakeDialect{}, byTopic{}, map[string]destination.Destination{"d": answers(c.errs)},
				Options{Breaker: BreakerOptions{Failures: 1, OpenFor: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			msgs := rows("d", "r", len(c.errs))
			cl := newClaim("tok", time.Now(), dialect.Claimed{Messages: msgs})
			p := part{claim: cl}
			for i := range cl.msgs {
				p.msgs = append(p.msgs, &cl.msgs[i])
			}
			e.lanes["d"].publish(context.Background(), p)
			if got := e.Circuits()["d"]; got != c.want {
				t.Errorf("answers %v: circuit %v, want %v", c.errs, got, c.want)
			}
		})
	}
}

func TestEngineReportsCircuits(t *testing.T) {
	e := &Engine{lanes: map[string]*lane{"a": {breaker: newBreaker(BreakerOptions{Failures: 1, OpenFor: time.Minute, MaxOpenFor: time.Minute})}}}
	if got := e.Circuits()["a"]; got != BreakerClosed {
		t.Fatalf("new circuit is %v, want closed", got)
	}
	e.lanes["a"].breaker.allow()
	e.lanes["a"].breaker.record(true)
	if got := e.Circuits()["a"]; got != BreakerOpen || got.String() != "open" {
		t.Fatalf("after a connection-level failure the circuit is %v, want open", got)
	}
}

func TestBreakerAbandonKeepsTheState(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(BreakerOptions{Failures: 1, OpenFor: time.Second, MaxOpenFor: time.Second})
	b.now = func() time.Time { return now }
	b.allow()
	b.record(true) // open
	now = now.Add(time.Second)
	if ok, _ := b.allow(); !ok {
		t.Fatal("no probe after OpenFor")
	}
	b.abandon() // the probe was cut short by shutdown
	if b.current() != BreakerHalfOpen {
		t.Fatalf("abandoned probe left the breaker %v, want still half-open", b.current())
	}
	if ok, _ := b.allow(); !ok {
		t.Fatal("after an abandoned probe another probe must be allowed")
	}
}

// TestBreakerPausesAFullDestination: fullAnswers answers in a row that the
// destination has no room (outbox.NoRoom) open the breaker, for the Retry-After the
// destination gave (capped at MaxOpenFor), or else for a pause that starts
// at 1 s and doubles while the destination stays full. The rows kept back
// meanwhile fail with NoRoom naming the limit, not as a destination down.
// An accepted row resets the pause; the pause ends closed.
func TestBreakerPausesAFullDestination(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(BreakerOptions{Failures: 5, OpenFor: 5 * time.Second, MaxOpenFor: 8 * time.Second})
	b.now = func() time.Time { return now }
	full := outbox.NoRoom("max_bytes", errors.New("stream full"))

	for i := 1; i < fullAnswers; i++ {
		if wait, paused := b.fullAnswer(full); wait != time.Second || paused || b.current() != BreakerClosed {
			t.Fatalf("full answer %d: wait %v (paused %v), breaker %v; want the row to wait 1s and the breaker closed", i, wait, paused, b.current())
		}
	}
	wait, paused := b.fullAnswer(full)
	if wait != time.Second || !paused || b.current() != BreakerOpen {
		t.Fatalf("full answer %d in a row: pause %v (paused %v), breaker %v; want open for 1s", fullAnswers, wait, paused, b.current())
	}
	if ok, w := b.allow(); ok || w != time.Second {
		t.Fatalf("paused: allow = %v, wait %v; want refused for 1s", ok, w)
	}
	if ok, _ := b.allowsQueue(); ok {
		t.Fatal("paused: rows may still queue")
	}
	reason := b.reason()
	if limit, ok := outbox.NoRoomLimit(reason); !ok || limit != "max_bytes" || outbox.IsUnavailable(reason) || !strings.Contains(reason.Error(), "max_bytes") {
		t.Fatalf("reason %v (limit %q, no room %v, unavailable %v); want NoRoom naming max_bytes", reason, limit, ok, outbox.IsUnavailable(reason))
	}
	// More full answers of the same publish do not extend the pause.
	now = now.Add(300 * time.Millisecond)
	if wait, paused := b.fullAnswer(full); wait != 700*time.Millisecond || paused {
		t.Fatalf("full answer while paused: %v (paused %v); want the 700ms left, not a new pause", wait, paused)
	}
	// The publish's outcome does not close a breaker paused for room.
	if _, to := b.record(false); to != BreakerOpen {
		t.Fatalf("record after a full answer: breaker %v, want still open", to)
	}

	// Each probe that finds the destination still full (fullAnswers
	// answers, counted afresh after a pause) doubles the pause, up to
	// MaxOpenFor.
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		now = now.Add(time.Hour)
		if ok, _ := b.allow(); !ok {
			t.Fatal("no probe after the pause")
		}
		for range fullAnswers - 1 {
			if wait, paused := b.fullAnswer(full); wait != want || paused {
				t.Fatalf("full answer to a probe: wait %v (paused %v), want the row to wait %v, not yet a pause", wait, paused, want)
			}
		}
		if wait, paused := b.fullAnswer(full); wait != want || !paused {
			t.Fatalf("full probe: pause %v (paused %v), want %v", wait, paused, want)
		}
		b.record(false)
	}
	// A Retry-After is followed as it is (capped), and does not double the
	// pause.
	for _, c := range []struct{ after, want time.Duration }{{3 * time.Second, 3 * time.Second}, {time.Minute, 8 * time.Second}} {
		now = now.Add(time.Hour)
		b.allow()
		for range fullAnswers - 1 {
			b.fullAnswer(outbox.RetryAfter(full, c.after))
		}
		if wait, _ := b.fullAnswer(outbox.RetryAfter(full, c.after)); wait != c.want {
			t.Fatalf("full answer with Retry-After %v: pause %v, want %v", c.after, wait, c.want)
		}
		b.record(false)
	}
	// An accepted row resets the pause, and the count of full answers:
	// the next one after it does not pause.
	now = now.Add(time.Hour)
	b.allow()
	b.answered()
	if wait, paused := b.fullAnswer(full); wait != time.Second || paused {
		t.Fatalf("full answer after a success: wait %v (paused %v), want 1s again and no pause", wait, paused)
	}
	b.record(false)
	for range fullAnswers - 1 {
		b.fullAnswer(full)
	}
	if b.current() != BreakerOpen {
		t.Fatalf("%d full answers in a row after a success: breaker %v, want open", fullAnswers, b.current())
	}
	// The pause ends closed; what the breaker keeps back later is a
	// destination down, not full.
	now = now.Add(time.Hour)
	if ok, _ := b.allow(); !ok || b.current() != BreakerClosed {
		t.Fatalf("after the pause: allowed %v, breaker %v; want closed", ok, b.current())
	}
	if outbox.IsNoRoom(b.reason()) || b.fullLimit() != "" {
		t.Fatalf("closed breaker still says the destination is full: %v", b.reason())
	}
}

// TestBreakerNoRoomAmongTakenRows: no-room answers among rows the
// destination takes (a rate limit's burst, one subject's limit) make only
// those rows wait: the destination is not paused, so its other rows keep
// going.
func TestBreakerNoRoomAmongTakenRows(t *testing.T) {
	b := newBreaker(BreakerOptions{Failures: 5, OpenFor: 5 * time.Second, MaxOpenFor: 30 * time.Second})
	limited := outbox.RetryAfter(outbox.NoRoom("http_429", errors.New("429 Too Many Requests")), 2*time.Second)
	for i := range 100 {
		if i%2 == 0 {
			b.answered()
			b.record(false)
			continue
		}
		if wait, paused := b.fullAnswer(limited); paused || wait != 2*time.Second {
			t.Fatalf("answer %d, a 429 between taken rows: wait %v (paused %v); want the row to wait its Retry-After and no pause", i, wait, paused)
		}
		if ok, _ := b.allow(); !ok {
			t.Fatalf("answer %d: the destination refuses publishes after a 429 between taken rows", i)
		}
	}
}

// TestBreakerPauseEndsClosed: a pause for room ends by itself, closed:
// every publish may go, and the first that gets no answer (a timeout)
// counts as one connection-level failure; it does not turn the pause into
// an outage of OpenFor or more.
func TestBreakerPauseEndsClosed(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(BreakerOptions{Failures: 5, OpenFor: 5 * time.Second, MaxOpenFor: 30 * time.Second})
	b.now = func() time.Time { return now }
	full := outbox.NoRoom("http_429", errors.New("429 Too Many Requests"))
	for range fullAnswers {
		b.fullAnswer(full)
	}
	now = now.Add(2 * time.Second)
	for i := range 3 {
		if ok, _ := b.allow(); !ok || b.current() != BreakerClosed {
			t.Fatalf("publish %d after the pause refused (breaker %v); want the breaker closed", i, b.current())
		}
	}
	if _, to := b.record(true); to != BreakerClosed {
		t.Fatalf("probe after a pause for room timed out: breaker %v, want closed (one failure counted)", to)
	}
	for i := 2; i < 5; i++ {
		if _, to := b.record(true); to != BreakerClosed {
			t.Fatalf("failure %d of 5: breaker %v, want closed", i, to)
		}
	}
	if _, to := b.record(true); to != BreakerOpen {
		t.Fatalf("5 failures in a row: breaker %v, want open", to)
	}
}
