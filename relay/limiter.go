package relay

import (
	"math"
	"sync"
	"time"
)

// limiter is a destination's limit on rows in flight: additive increase,
// multiplicative decrease, with a slow start, as TCP's congestion window.
//
// It counts answers in rounds of about one limit's worth of rows (one round
// trip of a full lane). At the end of a round:
//
//   - congestion (a row in the round failed in a way that says the
//     destination struggles: it is down, full, or timed out; or the
//     round's mean latency rose above twice the lowest seen recently, plus
//     a small allowance): the limit is cut to 70 %, and later growth is
//     additive;
//   - otherwise, if the round used at least half the limit, it grows:
//     doubling until the first congestion (slow start), then by a
//     twentieth. A limit that is not used does not grow, so that a burst
//     after a quiet spell does not meet a limit no answer has vouched for.
//
// A receiver whose latency does not depend on how many requests it serves
// (one that answers in 50 ms at any concurrency) is driven to the hard cap
// within a few round trips; one whose latency climbs with the load settles
// where it starts to climb, and is backed off from when it struggles. The
// hard cap (relay.concurrency, or a destination's concurrency) is never
// exceeded, and the limit is never cut below limitFloor.
type limiter struct {
	mu       sync.Mutex
	limit    float64
	min, max float64
	ssthresh float64 // +Inf until the first congestion: slow start

	// the current round
	acks      int
	rttSum    time.Duration
	congested bool
	used      int // the most rows in flight seen in the round

	// base is the lowest round latency seen since baseAt; it is forgotten
	// every baseSpan, so that a destination whose latency has risen for
	// good is not taken for congested for ever.
	base   time.Duration
	baseAt time.Time
	last   time.Duration // the last round's mean latency
	now    func() time.Time
}

const (
	baseSpan       = 30 * time.Second
	latencySlack   = 20 * time.Millisecond
	decreaseFactor = 0.7
)

// limitFloor is the least a limit is cut to (the hard cap, when lower). A
// receiver that fails a share of its requests whatever the load (a
// timeout here, a 429 there) cuts the limit at every round; with no floor
// it would be left one request at a time, each failure costing its full
// wait. A destination that cannot take this many at once is given a
// lower hard cap (its concurrency).
const limitFloor = 16

func newLimiter(initial, hardCap int) *limiter {
	hardCap = max(hardCap, 1)
	return &limiter{limit: float64(min(max(initial, 1), hardCap)), min: float64(min(limitFloor, hardCap)),
		max: float64(hardCap), ssthresh: math.Inf(1), now: time.Now}
}

// current is the limit, in rows.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// latency is the mean latency of the last complete round (0 before one).
func (l *limiter) latency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// record notes one row's answer after rtt, with inflight rows out when it
// came; congested says the answer tells of a struggling destination. It
// reports whether the limit changed, and the limit.
func (l *limiter) record(rtt time.Duration, inflight int, congested bool) (changed bool, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks++
	l.rttSum += rtt
	l.congested = l.congested || congested
	l.used = max(l.used, inflight)
	if float64(l.acks) < l.limit {
		return false, int(l.limit)
	}
	mean := l.rttSum / time.Duration(l.acks)
	l.last = mean
	now := l.now()
	if l.base == 0 || mean < l.base || now.Sub(l.baseAt) > baseSpan {
		l.base, l.baseAt = mean, now
	}
	before := int(l.limit)
	switch {
	case l.congested || mean > 2*l.base+latencySlack:
		l.limit = max(l.limit*decreaseFactor, l.min)
		l.ssthresh = l.limit
	case 2*float64(l.used) < l.limit:
		// Not limited by the limit: no evidence to grow on.
	case l.limit < l.ssthresh:
		l.limit = min(2*l.limit, l.max)
	default:
		l.limit = min(l.limit+max(1, l.limit/20), l.max)
	}
	l.acks, l.rttSum, l.congested, l.used = 0, 0, false, 0
	return int(l.limit) != before, int(l.limit)
}
