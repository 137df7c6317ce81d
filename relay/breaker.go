package relay

import (
	"errors"
	"sync"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// BreakerState is the state of a destination's circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	BreakerClosed   BreakerState = iota // deliveries flow
	BreakerOpen                         // the destination is down: rows wait without spending attempts
	BreakerHalfOpen                     // one probe batch is allowed through
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	default:
		return "closed"
	}
}

// BreakerOptions tune the per-destination circuit breakers.
type BreakerOptions struct {
	// Failures is the number of consecutive publishes that fail at the
	// connection level (outbox.Unavailable) before the breaker opens (5).
	Failures int
	// OpenFor is how long the breaker stays open before it lets one probe
	// batch through (5s); it doubles after each failed probe up to
	// MaxOpenFor (30s).
	OpenFor    time.Duration
	MaxOpenFor time.Duration
}

func (o *BreakerOptions) setDefaults() {
	if o.Failures <= 0 {
		o.Failures = 5
	}
	if o.OpenFor <= 0 {
		o.OpenFor = 5 * time.Second
	}
	if o.MaxOpenFor < o.OpenFor {
		o.MaxOpenFor = max(o.OpenFor, 30*time.Second)
	}
}

// errCircuitOpen is the failure of a row whose destination's breaker is
// open: it was not published at all.
var errCircuitOpen = errors.New("circuit open: the destination failed at the connection level; not published")

// breaker is one destination's circuit breaker. It counts consecutive
// publishes that failed at the connection level; other failures (a 500, a
// refused message) say the destination is up and reset the count.
type breaker struct {
	opt BreakerOptions
	now func() time.Time

	mu        sync.Mutex
	state     BreakerState
	failures  int
	openFor   time.Duration
	openUntil time.Time
	probing   bool
}

func newBreaker(opt BreakerOptions) *breaker {
	return &breaker{opt: opt, now: time.Now, openFor: opt.OpenFor}
}

// current returns the breaker's state.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Circuits returns the state of every destination's circuit breaker.
func (e *Engine) Circuits() map[string]BreakerState {
	out := make(map[string]BreakerState, len(e.breakers))
	for name, b := range e.breakers {
		out[name] = b.current()
	}
	return out
}

// allow reports whether a publish may go ahead. When it may not, wait is
// how long until the breaker lets a probe through.
func (b *breaker) allow() (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, 0
	case BreakerOpen:
		now := b.now()
		if now.Before(b.openUntil) {
			return false, b.openUntil.Sub(now)
		}
		b.state = BreakerHalfOpen
		b.probing = true
		return true, 0
	default: // half-open: one probe at a time
		if b.probing {
			return false, b.opt.OpenFor // the probe may close it soon: look again after the base wait
		}
		b.probing = true
		return true, 0
	}
}

// record notes the outcome of a publish that allow let through and returns
// the state before and after.
func (b *breaker) record(unavailable bool) (from, to BreakerState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = b.state
	b.probing = false
	if !unavailable {
		b.state, b.failures, b.openFor = BreakerClosed, 0, b.opt.OpenFor
		return from, b.state
	}
	b.failures++
	switch {
	case b.state == BreakerHalfOpen:
		b.openFor = min(b.openFor*2, b.opt.MaxOpenFor)
		b.state, b.openUntil = BreakerOpen, b.now().Add(b.openFor)
	case b.state == BreakerClosed && b.failures >= b.opt.Failures:
		b.state, b.openUntil = BreakerOpen, b.now().Add(b.openFor)
	}
	return from, b.state
}

// abandon ends a publish that allow let through without an outcome (cut
// short by shutdown): a probe slot is freed, nothing else changes.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// batchUnavailable reports whether a publish outcome is a connection-level
// failure of the destination as a whole: every message failed, all with
// outbox.Unavailable.
func batchUnavailable(errs []error) bool {
	if len(errs) == 0 {
		return false
	}
	for _, err := range errs {
		if err == nil || !outbox.IsUnavailable(err) {
			return false
		}
	}
	return true
}

// circuitOpenError is a row's failure while its destination's breaker is
// open: unavailable, due again when the breaker lets a probe through. The
// row's last_error names the destination (Engine.reason).
func circuitOpenError(wait time.Duration) error {
	return outbox.RetryAfter(outbox.Unavailable(errCircuitOpen), wait)
}
