package relay

import (
	"context"
	"sync"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// outcome is what happened to one claimed row.
type outcome struct {
	claim *claim
	msg   *outbox.Message
	dest  string
	err   error // nil: delivered
	// deferred: the destination as a whole could not take the row (down,
	// full, its circuit open, or holding its share of the budget); the row
	// waits without spending an attempt.
	deferred bool
	// cut: the row's publish was cut short (shutdown, or a lease that could
	// not be kept): it is released without spending an attempt.
	cut bool
}

// settleDelay is how long the outcomes of a claim whose other rows are
// still out may wait to be written together with more of them.
const settleDelay = 20 * time.Millisecond

// settler writes outcomes to the table, grouped by claim: one statement per
// claim and kind of outcome. A claim's outcomes are written as soon as
// every row of the claim has one; the outcomes of a claim whose other rows
// are still out (a slow destination, a slow key) are written after at most
// settleDelay. So a row settles, and its key and its share of the budget
// are free, a few milliseconds after its own answer at most, whatever the
// other rows of its claim are doing, and a claim whose rows answer together
// costs one statement. In lock mode a claim's rows are written, and its
// transaction committed, once all of them have an outcome.
type settler struct {
	e *Engine

	mu       sync.Mutex
	pending  map[*claim]*pendingClaim
	stopping bool
	signal   chan struct{}
}

// pendingClaim is the outcomes of a claim not yet written.
type pendingClaim struct {
	outcomes []outcome
	first    time.Time // when the first of them came
}

func newSettler(e *Engine) *settler {
	return &settler{e: e, pending: map[*claim]*pendingClaim{}, signal: make(chan struct{}, 1)}
}

// add hands one outcome to the settler. It never blocks.
func (s *settler) add(o outcome) {
	c := o.claim
	s.mu.Lock()
	p := s.pending[c]
	if p == nil {
		p = &pendingClaim{first: time.Now()}
		s.pending[c] = p
	}
	p.outcomes = append(p.outcomes, o)
	c.answered++
	wake := len(p.outcomes) == 1 || c.answered == len(c.msgs)
	s.mu.Unlock()
	if wake {
		s.wake()
	}
}

func (s *settler) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// stop makes run return once nothing is pending.
func (s *settler) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.wake()
}

// run writes what is due until stop.
func (s *settler) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, next, stopping := s.due()
		for _, d := range due {
			s.e.settleClaim(d.claim, d.outcomes)
		}
		if len(due) > 0 {
			continue // more may have come meanwhile
		}
		if stopping && next.IsZero() {
			return
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		t.Reset(wait)
		select {
		case <-s.signal:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// dueClaim is outcomes of one claim to write now.
type dueClaim struct {
	claim    *claim
	outcomes []outcome
}

// due takes the outcomes to write now: those of claims whose rows all have
// one (lock mode: only those), and those that waited settleDelay. next is
// when the earliest of the others is due (zero: none); stopping writes
// everything.
func (s *settler) due() (due []dueClaim, next time.Time, stopping bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for c, p := range s.pending {
		complete := c.answered == len(c.msgs)
		at := p.first.Add(settleDelay)
		if complete || (s.e.commit == nil && (!now.Before(at) || s.stopping)) {
			due = append(due, dueClaim{c, p.outcomes})
			delete(s.pending, c)
			continue
		}
		if s.e.commit == nil && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if s.stopping && len(s.pending) > 0 && next.IsZero() {
		// Lock mode, stopping: claims whose last outcome has not come
		// wait for it (the lanes release what they hold at the end).
		next = now.Add(settleDelay)
	}
	return due, next, s.stopping
}

// settleClaim writes outcomes of claim c and frees their rows.
func (e *Engine) settleClaim(c *claim, outcomes []outcome) {
	c.writeMu.Lock()
	report := e.settle(e.log, c, outcomes)
	committed := true
	if e.commit != nil {
		ctx, cancel := context.WithTimeout(context.Background(), e.opt.Lease)
		err := e.commit.Commit(ctx, c.token)
		cancel()
		if err != nil {
			e.log.Error("batch not committed: its rows stay pending and are delivered again (same ids)", "token", c.token, "rows", len(c.msgs), "err", err)
			committed = false
			e.pauseClaims(min(max(e.opt.Backoff.Base, e.opt.PollInterval), e.opt.MaxPollInterval))
		}
	}
	open := c.open.Add(-int64(len(outcomes)))
	c.writeMu.Unlock()
	e.keys.remove(outcomes, c.sent)
	report(committed)
	if open <= 0 {
		e.claims.remove(c)
		if f, ok := e.db.(dialect.ClaimForgetter); ok {
			f.Forget(c.token)
		}
	}
	e.inflight.Add(-int64(len(outcomes)))
	e.signalChanged()
}
