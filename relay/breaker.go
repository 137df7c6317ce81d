package relay

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// BreakerState is the state of a destination's circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	BreakerClosed   BreakerState = iota // deliveries flow
	BreakerOpen                         // the destination is down or full: rows wait without spending attempts
	BreakerHalfOpen                     // one probe publish is allowed through
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
	// publish through (5s); it doubles after each failed probe up to
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

// fullFor is the first pause of a destination that says it has no room
// (outbox.NoRoom) without saying for how long; each full answer in a row
// doubles it, up to BreakerOptions.MaxOpenFor.
const fullFor = time.Second

// fullAnswers is how many no-room answers in a row, with no row answered
// between them, pause a destination. A no-room answer among rows the
// destination takes is a limit that row met (a rate limit's burst, one
// subject's limit): the row waits, the lane's limiter slows down, and the
// other rows keep going.
const fullAnswers = 3

// errCircuitOpen is the failure of a row whose destination's breaker is
// open: it was not published at all.
var errCircuitOpen = errors.New("circuit open: the destination failed at the connection level; not published")

// breaker is one destination's circuit breaker. It opens after Failures
// consecutive publishes that failed at the connection level (other
// failures, a 500 or a refused message, say the destination is up and
// reset the count), and when the destination says it is full
// (fullAnswer). Open because the destination is down, it lets one probe
// through after a while, and the probe's outcome closes or reopens it;
// paused for room, it closes when the pause ends.
type breaker struct {
	opt BreakerOptions
	now func() time.Time

	mu         sync.Mutex
	state      BreakerState
	failures   int
	openFor    time.Duration
	openUntil  time.Time
	probing    bool
	lastAnswer time.Time
	// full is the limit named by the answer that opened the breaker, when
	// the destination is full rather than down; pause is the next pause.
	full  string
	pause time.Duration
	// fullInRow counts the no-room answers since the last answered row.
	fullInRow int
}

func newBreaker(opt BreakerOptions) *breaker {
	return &breaker{opt: opt, now: time.Now, openFor: opt.OpenFor, pause: fullFor}
}

// current returns the breaker's state.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Circuits returns the state of every destination's circuit breaker.
func (e *Engine) Circuits() map[string]BreakerState {
	out := make(map[string]BreakerState, len(e.lanes))
	for name, l := range e.lanes {
		out[name] = l.breaker.current()
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
		if b.full != "" {
			// A pause for room ends by itself: rows flow again, and
			// fullAnswers more no-room answers in a row pause it again.
			b.state, b.full, b.failures = BreakerClosed, "", 0
			return true, 0
		}
		b.state = BreakerHalfOpen
		b.probing = true
		return true, 0
	default: // half-open: one probe at a time
		if b.probing {
			return false, min(b.opt.OpenFor, b.pause) // the probe may close it soon
		}
		b.probing = true
		return true, 0
	}
}

// allowsQueue reports whether rows may queue for the destination: not
// while the breaker is open and no probe is due. It takes no probe slot.
func (b *breaker) allowsQueue() (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen {
		if now := b.now(); now.Before(b.openUntil) {
			return false, b.openUntil.Sub(now)
		}
	}
	return true, 0
}

// reason is the failure given to rows the breaker keeps back: the
// destination is down, or full.
func (b *breaker) reason() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.full != "" {
		return outbox.NoRoom(b.full, fmt.Errorf("not published: the destination has no room (%s); it is paused", b.full))
	}
	return outbox.Unavailable(errCircuitOpen)
}

// record notes the outcome of a publish that allow let through (down: it
// failed at the connection level as a whole) and returns the state before
// and after.
func (b *breaker) record(down bool) (from, to BreakerState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = b.state
	b.probing = false
	if b.state == BreakerOpen && b.full != "" {
		return from, b.state // paused for room by an answer of this publish
	}
	if !down {
		b.state, b.failures, b.openFor, b.full = BreakerClosed, 0, b.opt.OpenFor, ""
		return from, b.state
	}
	b.full = ""
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

// fullAnswer notes that the destination answered it has no room for a row
// (err, marked outbox.NoRoom). The row waits for the delay the destination
// asked for, else for a pause that doubles while the destination stays
// full. The breaker opens, pausing the destination for that long, at the
// fullAnswers-th such answer with no row answered between them, counted
// afresh after each pause. It returns how long the row waits, and whether this answer paused
// the destination (rather than one before it, still in force, or none).
func (b *breaker) fullAnswer(err error) (wait time.Duration, paused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.state == BreakerOpen && b.full != "" && now.Before(b.openUntil) {
		return b.openUntil.Sub(now), false
	}
	b.fullInRow++
	wait = b.pause
	own := false
	if d, ok := outbox.RetryDelay(err); ok && d > 0 {
		wait, own = min(d, b.opt.MaxOpenFor), true
	}
	if b.fullInRow < fullAnswers {
		return wait, false
	}
	if !own {
		b.pause = min(2*b.pause, b.opt.MaxOpenFor)
	}
	limit, _ := outbox.NoRoomLimit(err)
	b.state, b.full, b.openUntil, b.probing, b.fullInRow = BreakerOpen, limit, now.Add(wait), false, 0
	return wait, true
}

// answered notes a row the destination answered (took, or refused for a
// reason of the row's own): it is up and has room; the next pause for room
// starts again from fullFor. (The publish's record closes the breaker.)
func (b *breaker) answered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastAnswer = b.now()
	b.pause = fullFor
	b.fullInRow = 0
}

// noAnswerSince reports whether the destination answered no row since t.
func (b *breaker) noAnswerSince(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastAnswer.Before(t)
}

// abandon ends a publish that allow let through without an outcome (cut
// short by shutdown): a probe slot is freed, nothing else changes.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// fullLimit is the limit named by the answer that paused the destination,
// "" when it is not paused for room.
func (b *breaker) fullLimit() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full
}
