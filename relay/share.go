package relay

import (
	"sync"
	"sync/atomic"
)

// turnShare decides how many of an engine's workers claim while the table's
// claim turn is shared with other relays (dialect.ClaimTurnReporter).
//
// The claims of every relay on a table take one turn (relay.claimTurns:
// table). When most claims find the turn held by another relay's claim, the
// turn is what the relays queue on: the table cannot deliver faster than its
// claims run one after the other, and more batches in flight add only
// database work — more backends at once, more row versions alive, more
// switching between them — without adding claims. So while the turn is
// seen saturated, an engine halves the workers that claim, down to one; the
// others sit out (Engine.sitOut) until the count rises again. Measured on a
// 2-core machine with three replicas: 0.80 × the bare loop against 0.71 with
// every worker claiming, medians of alternating rounds (docs/performance.md,
// lesson 35).
//
// What it watches is the share of claims that queued, as a moving average
// over about the last shareSpan turn claims: at shedAt or more, the turn is
// saturated; below raiseAt, it has room. Halving is undone when the turn has
// room at the smaller count. With a slow destination, say, the turn can look
// saturated with many batches in flight and have room with half as many;
// each return to the full count that follows a short spell at the smaller one
// doubles the number of claims (holdoff) before the next halving, so such a
// table does not keep swinging between the two.
type turnShare struct {
	max    int          // Options.InflightBatches
	active atomic.Int32 // workers that claim now, 1..max

	mu      sync.Mutex
	more    chan struct{} // closed and replaced when the count rises (raised)
	queued  float64       // moving average of the claims that queued, 0..1
	since   int           // turn claims since the count last changed
	holdoff int           // turn claims at the full count before the next halving
}

// The log messages of a change in the count of claiming workers; the
// benchmark counts them in the replicas' logs (internal/bench).
const (
	LogFewerWorkers = "claim turn saturated by several relays: fewer workers claim"
	LogMoreWorkers  = "claim turn has room again: more workers claim"
)

const (
	// shareSpan is the span of the moving average, in turn claims.
	shareSpan = 32
	// Halve at shedAt or more; double below raiseAt.
	shedAt  = 0.75
	raiseAt = 0.5
	// minSpell is the least number of turn claims between two changes.
	minSpell = 16
	// A spell at a smaller count shorter than shortSpell turn claims
	// doubles holdoff (from minSpell up to maxHoldoff) when it ends; a
	// longer one resets it.
	shortSpell = 64
	maxHoldoff = 1024
)

func newTurnShare(max int) *turnShare {
	s := &turnShare{max: max, more: make(chan struct{})}
	s.active.Store(int32(max))
	return s
}

// workers is the number of workers that claim now: worker ids below it.
func (s *turnShare) workers() int { return int(s.active.Load()) }

// raised returns a channel that is closed when the count next rises: a
// worker left out takes it, then checks workers again, then waits on it.
func (s *turnShare) raised() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.more
}

// report records whether a claim had to queue for the table's claim turn.
// It returns the worker count before and after; they differ when it
// changed.
func (s *turnShare) report(queued bool) (from, to int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := 0.0
	if queued {
		x = 1
	}
	s.queued += (x - s.queued) / shareSpan
	s.since++
	from = int(s.active.Load())
	switch {
	case s.since < minSpell:
		return from, from
	case s.queued >= shedAt && from > 1 && (from < s.max || s.since >= s.holdoff):
		to = max(1, from/2)
	case s.queued < raiseAt && from < s.max:
		to = min(s.max, 2*from)
		if to == s.max {
			if s.since < shortSpell {
				s.holdoff = min(max(2*s.holdoff, minSpell), maxHoldoff)
			} else {
				s.holdoff = 0
			}
		}
		close(s.more)
		s.more = make(chan struct{})
	default:
		return from, from
	}
	s.active.Store(int32(to))
	s.since = 0
	return from, to
}
