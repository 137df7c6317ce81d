package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// claim is the rows of one claim statement, held under one token and one
// lease until the last of them is settled.
type claim struct {
	token string
	sent  time.Time // when the claim was sent: the lease is vouched for from then
	msgs  []outbox.Message

	// ctx is the context the claim's rows are published with: it ends when
	// the lease can no longer be vouched for (renewer), or at the shutdown
	// deadline (it derives from the lanes' context).
	ctx    context.Context
	cancel context.CancelFunc
	lost   atomic.Bool // the lease was lost: publishing more would be a duplicate

	// writeMu orders the claim's settlement statements and its renewals,
	// so that a renewal's count is compared with the rows still open
	// (renewer).
	writeMu sync.Mutex
	open    atomic.Int64 // rows not yet settled

	answered int // rows with an outcome; guarded by the settler's mutex
	// splits is what is left of the statements that narrowing down refused
	// rows may cost the claim (maxSplitStatements); guarded by writeMu.
	splits int

	mu        sync.Mutex
	confirmed time.Time // when the last successful renewal (or the claim) was sent
}

func newClaim(token string, sent time.Time, res dialect.Claimed) *claim {
	c := &claim{token: token, sent: sent, msgs: res.Messages, confirmed: sent, splits: maxSplitStatements}
	c.open.Store(int64(len(res.Messages)))
	return c
}

// start gives the claim its publishing context, under parent.
func (c *claim) start(parent context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancel(parent)
	}
}

// publishContext is the claim's publishing context, started under parent
// if it was not yet.
func (c *claim) publishContext(parent context.Context) context.Context {
	c.start(parent)
	return c.ctx
}

// lose marks the lease lost and stops the claim's publishing.
func (c *claim) lose() {
	c.lost.Store(true)
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// claimSet is the claims with rows not yet settled.
type claimSet struct {
	mu sync.Mutex
	m  map[*claim]struct{}
}

func newClaimSet() *claimSet { return &claimSet{m: map[*claim]struct{}{}} }

func (s *claimSet) add(c *claim) {
	s.mu.Lock()
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *claimSet) remove(c *claim) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
}

func (s *claimSet) snapshot() []*claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*claim, 0, len(s.m))
	for c := range s.m {
		out = append(out, c)
	}
	return out
}

// leaseMargin is the part of the lease that the renewer leaves unused: when
// no renewal has succeeded for Lease − Lease/leaseMargin, the claim's
// publishing stops (lost), before another relay may reclaim its rows.
const leaseMargin = 6

// renewer extends the lease of every claim with rows out, every Lease/3
// counted from its last confirmation, until ctx ends. A claim whose lease
// cannot be kept stops publishing (claim.lose):
//
//   - a renewal finds fewer of the claim's rows than are still open: the
//     others were reclaimed after their lease expired, and another relay
//     delivers them; publishing on would send them again, possibly after
//     that relay has sent the key's next row;
//   - no renewal has succeeded for Lease − Lease/leaseMargin since the
//     lease was last confirmed (when the claim was sent; then when each
//     successful renewal was sent, which is no later than the database's
//     clock set the lease). A relay that cannot reach its database (a
//     partition, a stalled pool) must not publish past the lease: once it
//     expires another relay's reaper returns the rows to pending, that
//     relay delivers them and then the key's next row, and a copy
//     published after that arrives out of order;
//   - in lock mode, the claim's transaction nears its lock timeout
//     (dialect.BatchDeadliner), which no renewal moves.
func (e *Engine) renewer(ctx context.Context) {
	tick := max(e.opt.Lease/leaseMargin/2, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range e.claims.snapshot() {
			if ctx.Err() != nil {
				return
			}
			e.renewClaim(ctx, c)
		}
	}
}

// renewClaim renews c's lease when it is due, and stops c when its lease
// can no longer be vouched for.
func (e *Engine) renewClaim(ctx context.Context, c *claim) {
	if c.lost.Load() || c.open.Load() == 0 {
		return
	}
	every, keep := e.opt.Lease/3, e.opt.Lease-e.opt.Lease/leaseMargin
	c.mu.Lock()
	confirmed := c.confirmed
	c.mu.Unlock()
	deadline := confirmed.Add(keep)
	if bd, ok := e.db.(dialect.BatchDeadliner); ok {
		if end, ok := bd.BatchDeadline(c.token); ok {
			if hard := end.Add(-end.Sub(c.sent) / leaseMargin); hard.Before(deadline) {
				if !time.Now().Before(hard) {
					e.log.Warn("the batch's lock timeout is near: its publishing is stopped; its rows stay pending and are delivered again (same ids); raise relay.lockTimeout above the longest publish",
						"token", c.token, "rows", len(c.msgs))
					c.lose()
					return
				}
			}
		}
	}
	now := time.Now()
	if !now.Before(deadline) {
		e.log.Warn("lease not renewed in time: publishing is stopped before the lease expires; its rows go back to pending, or to the relay that reclaims them (same ids)",
			"token", c.token, "lease", e.opt.Lease, "unconfirmed_for", now.Sub(confirmed).Round(time.Millisecond))
		c.lose()
		return
	}
	if now.Before(confirmed.Add(every)) {
		return
	}
	// Each renewal gets a third of the lease, and never runs past the
	// deadline: a connection that hangs must not keep the claim from its
	// next try, or its publishing from stopping in time.
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	open := c.open.Load()
	if open == 0 {
		return
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, min(every, time.Until(deadline)))
	n, err := e.db.Renew(rctx, dialect.RenewParams{Token: c.token, Lease: e.opt.Lease})
	cancel()
	switch {
	case err != nil:
		e.log.Warn("lease renewal failed; retrying before the lease expires", "token", c.token, "err", err)
	case n < open:
		// Rows of the claim were reclaimed after their lease expired
		// (n == 0: all of them): another relay delivers them.
		e.log.Warn("lease lost while rows were out: their publishing is stopped; another relay delivers these rows (same ids)",
			"token", c.token, "rows", open, "still_held", n)
		c.lose()
	default:
		c.mu.Lock()
		c.confirmed = sent
		c.mu.Unlock()
	}
}

// confirmLease renews c's lease once, before its rows are published, and
// reports whether every row is still held.
func (e *Engine) confirmLease(ctx context.Context, c *claim) bool {
	sent := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Lease/3)
	n, err := e.db.Renew(rctx, dialect.RenewParams{Token: c.token, Lease: e.opt.Lease})
	cancel()
	if err != nil || n < int64(len(c.msgs)) {
		e.log.Warn("a slow claim's lease could not be confirmed: its rows are released without being published (same ids, no attempt spent)",
			"token", c.token, "rows", len(c.msgs), "still_held", n, "err", err)
		return false
	}
	c.mu.Lock()
	c.confirmed = sent
	c.mu.Unlock()
	return true
}

// keySet counts the rows in flight per key, and since when each key has
// had one.
type keySet struct {
	mu sync.Mutex
	m  map[string]keyRows
	// slow are keys whose last row took longer than patience to settle:
	// their next row is taken for overdue at once (a key that goes to a
	// slow receiver).
	slow map[string]bool
	// settle is a moving average of the time from a claim to the
	// settlement of its rows: how long a key usually stays in flight.
	settle time.Duration
}

type keyRows struct {
	n     int
	since time.Time
}

func (k *keySet) add(msgs []outbox.Message, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range msgs {
		if key := msgs[i].Key; key != "" {
			r := k.m[key]
			if r.n == 0 {
				r.since = at
			}
			r.n++
			k.m[key] = r
		}
	}
}

// remove ends the rows of outcomes, claimed at claimed.
func (k *keySet) remove(outcomes []outcome, claimed time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := time.Since(claimed); k.settle == 0 {
		k.settle = d
	} else {
		k.settle += (d - k.settle) / 16
	}
	slow := time.Since(claimed) > k.patience()
	for _, o := range outcomes {
		key := o.msg.Key
		if key == "" {
			continue
		}
		switch {
		case slow && len(k.slow) < maxSlowKeys:
			if k.slow == nil {
				k.slow = map[string]bool{}
			}
			k.slow[key] = true
		case !slow:
			delete(k.slow, key)
		}
		if r := k.m[key]; r.n <= 1 {
			delete(k.m, key)
		} else {
			r.n--
			k.m[key] = r
		}
	}
}

// patience bounds how long a key in flight here is taken to be on its
// way to settling soon: eight times the usual, from 250 ms to 2 s.
func (k *keySet) patience() time.Duration {
	return min(max(8*k.settle, 250*time.Millisecond), 2*time.Second)
}

// state reports whether key has a row in flight here (held), and whether
// that row is not overdue (soon): the window it holds frees itself
// shortly. A key whose row has been out longer than usual (a slow
// receiver, a slow key) is held, not soon.
func (k *keySet) state(key string) (held, soon bool) {
	if key == "" {
		return false, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.m[key]
	return r.n > 0, r.n > 0 && !k.slow[key] && time.Since(r.since) < k.patience()
}

// maxSlowKeys bounds the keys remembered as slow.
const maxSlowKeys = 4096

// holds reports whether key has a row in flight here.
func (k *keySet) holds(key string) bool {
	held, _ := k.state(key)
	return held
}
