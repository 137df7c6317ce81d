package relay

import (
	"errors"
	"testing"
	"time"

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

func TestBatchUnavailable(t *testing.T) {
	down := outbox.Unavailable(errors.New("connection refused"))
	other := errors.New("500")
	cases := []struct {
		errs []error
		want bool
	}{
		{nil, false},
		{[]error{down, down}, true},
		{[]error{down, nil}, false},
		{[]error{down, other}, false},
		{[]error{outbox.Permanent(down)}, true},
	}
	for i, c := range cases {
		if got := batchUnavailable(c.errs); got != c.want {
			t.Errorf("case %d: batchUnavailable = %v, want %v", i, got, c.want)
		}
	}
}

func TestEngineReportsCircuits(t *testing.T) {
	e := &Engine{breakers: map[string]*breaker{"a": newBreaker(BreakerOptions{Failures: 1, OpenFor: time.Minute, MaxOpenFor: time.Minute})}}
	if got := e.Circuits()["a"]; got != BreakerClosed {
		t.Fatalf("new circuit is %v, want closed", got)
	}
	e.breakers["a"].allow()
	e.breakers["a"].record(true)
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
