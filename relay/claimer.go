package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// claimLoop claims rows while the in-flight budget has room and hands them
// to the lanes, until ctx ends. Claims run one at a time; publishing and
// settling run beside them in the lanes and the settler.
func (e *Engine) claimLoop(ctx context.Context) {
	sw := newSweep()
	empty := 0     // consecutive claims that found nothing
	armed := false // the wake was just armed: the next claim must run
	for ctx.Err() == nil {
		if d := e.pausedFor(); d > 0 {
			// A lock-mode claim did not commit: its rows are due again at
			// once, and claiming them again without a pause would repeat
			// whatever failed as fast as it fails.
			sleepCtx(ctx, d)
			continue
		}
		free := e.opt.MaxInflight - int(e.inflight.Load())
		if free < e.minClaim() {
			// The budget is taken: a settlement frees it.
			e.waitChange(ctx, nil, e.opt.MaxPollInterval)
			continue
		}
		limit := min(e.opt.BatchSize, free)
		sw.prune(func(k string) bool { return !e.keys.holds(k) })
		w := sw.next()
		wake := e.wakeChan()
		// A claim right after a fresh arming is not a poll: a poll may skip
		// while another relay claims, and this one must see the rows of
		// producers that did not notify.
		poll := empty > 0 && !armed
		armed = false
		c, res, err := e.claim(ctx, limit, w, poll)
		if errors.Is(err, dialect.ErrClaimTurnBusy) {
			err = nil // a skipped poll: it ran nothing and found nothing
		}
		if err != nil {
			empty++
			if ctx.Err() != nil {
				return
			}
			wait := e.idleWait(empty)
			e.claimFails.failed(e.log, err, wait)
			e.waitChange(ctx, wake, wait)
			continue
		}
		e.claimFails.ok(e.log)
		got := len(res.Messages)
		pause := time.Duration(0)
		if got > 0 {
			pause = e.dispatch(ctx, c)
		}
		by := e.blockersOf(res.Blockers)
		by.thin = len(res.Blockers) < min(dialect.MaxBlockers, limit-got)
		again := e.sweeper != nil && sw.claimed(w, limit, got, res.Start, res.More, res.Next, by)
		if got < limit && e.log.Enabled(ctx, slog.LevelDebug) {
			e.log.Debug("claim took fewer rows than asked", "from", w.from, "skip", len(w.skip), "asked", limit, "got", got,
				"start", res.Start, "more", res.More, "next", res.Next, "settling_here", by.settling(), "blocked_by", by.others, "again", again)
		}
		if pause > 0 {
			// Every row of the claim went to a destination that is down
			// or full: claiming again at once would take the same rows on
			// a table that cannot hold them back (no scheduledAt). Their
			// settlement must not end the pause.
			sleepCtx(ctx, pause)
		}
		switch {
		case got >= limit || again:
			empty = 0
			continue
		case got > 0:
			// The window holds no more ready rows now: the next ones
			// become heads as the rows in flight settle.
			empty = 0
			e.waitChange(ctx, wake, e.opt.PollInterval)
			continue
		}
		empty++
		wait := e.idleWait(empty)
		if e.inflight.Load() > 0 {
			// Rows in flight: their settlement frees their keys.
			e.waitChange(ctx, wake, wait)
			continue
		}
		// Idle. With a wake source, ask producers to notify before
		// sleeping (Options.Arm).
		if e.opt.Arm != nil {
			switch e.arm(ctx) {
			case ArmFresh:
				armed = true
				continue // producers notify from now on: claim what came before
			case ArmWatched:
				// Producers notify while the engine sleeps: polling is only
				// the safety net.
				wait = e.opt.MaxPollInterval
			}
		}
		if e.waitChange(ctx, wake, wait) {
			empty = 0 // woken: new rows may be ready
		}
	}
}

// blockersOf sorts the keys of a window's first unclaimed rows. The claim
// left out the keys it was told to skip (dialect.Claimed.Blockers).
func (e *Engine) blockersOf(keys []string) blockers {
	var by blockers
	for _, k := range keys {
		if slices.Contains(by.others, k) || slices.Contains(by.soon, k) {
			continue
		}
		switch held, soon := e.keys.state(k); {
		case soon:
			by.soon = append(by.soon, k)
		case held:
			by.others = append(by.others, k)
			by.overdue = append(by.overdue, k)
		default:
			by.others = append(by.others, k)
		}
	}
	return by
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pauseClaims keeps the claimer from claiming for d.
func (e *Engine) pauseClaims(d time.Duration) {
	e.pauseUntil.Store(time.Now().Add(d).UnixNano())
}

// pausedFor is how long the claimer must still wait (pauseClaims).
func (e *Engine) pausedFor() time.Duration {
	return time.Until(time.Unix(0, e.pauseUntil.Load()))
}

// minClaim is the least free budget worth a claim: half a batch, so that a
// nearly full budget does not turn into many small claims.
func (e *Engine) minClaim() int { return max(min(e.opt.BatchSize, e.opt.MaxInflight)/2, 1) }

// waitChange waits until a settlement frees rows, wake is closed, d passes
// or ctx ends. It reports whether it was woken (wake) rather than timed out.
func (e *Engine) waitChange(ctx context.Context, wake <-chan struct{}, d time.Duration) (woken bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-e.changed:
	case <-wake:
		return true
	case <-t.C:
	}
	return false
}

// arm asks producers to notify before the engine sleeps (Options.Arm).
func (e *Engine) arm(ctx context.Context) Arming {
	a, err := e.opt.Arm(ctx)
	switch {
	case err == nil:
		e.armFailing.Store(false)
		return a
	case ctx.Err() == nil && !e.armFailing.Swap(true): // once per spell of failures
		e.log.Warn("wake on commit: could not ask producers to notify; polling until it works again", "err", err)
	}
	return ArmUnavailable
}

// idleWait is how long the claimer waits after empty consecutive claims
// that found nothing: PollInterval for the first second of quiet, then
// doubling up to MaxPollInterval, so that an empty table costs a few
// queries per second and a burst after a quiet spell waits at most
// MaxPollInterval (or nothing, with a Wake source).
func (e *Engine) idleWait(empty int) time.Duration {
	grace := max(int(time.Second/e.opt.PollInterval), 1)
	if empty <= grace {
		return e.opt.PollInterval
	}
	d := e.opt.PollInterval
	for i := grace; i < empty && d < e.opt.MaxPollInterval; i++ {
		d *= 2
	}
	return min(d, e.opt.MaxPollInterval)
}

// claim runs one claim statement of up to limit rows whose window starts at
// w and registers the claim's rows as in flight.
func (e *Engine) claim(ctx context.Context, limit int, w window, poll bool) (*claim, dialect.Claimed, error) {
	token := uuid.NewString()
	start := time.Now()
	// The claim is not cancelled by shutdown: a claim the server committed
	// but whose answer was dropped would leave rows processing until their
	// lease expired. A claimed batch is then delivered within the shutdown
	// window like any other.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Lease)
	defer cancel()
	p := dialect.ClaimParams{Token: token, Limit: limit, Lease: e.opt.Lease, Poll: poll}
	var res dialect.Claimed
	var err error
	if e.sweeper != nil {
		p.Window, p.From, p.Skip = windowSize(e.opt.BatchSize), w.from, w.skip
		res, err = e.sweeper.ClaimNext(claimCtx, p)
	} else {
		res.Messages, err = e.db.Claim(claimCtx, p)
	}
	if errors.Is(err, dialect.ErrClaimTurnBusy) {
		return nil, res, err
	}
	e.obs.Claimed(len(res.Messages), limit, time.Since(start), err)
	if !w.front() && err == nil {
		e.obs.ClaimedPastFront(len(res.Messages))
	}
	if err != nil {
		return nil, res, fmt.Errorf("claim: %w", err)
	}
	c := newClaim(token, start, res)
	if len(res.Messages) > 0 {
		e.inflight.Add(int64(len(res.Messages)))
		e.claims.add(c)
		e.keys.add(res.Messages, start)
	}
	return c, res, nil
}

// dispatch routes the rows of a claim to their lanes; rows that cannot be
// routed are settled at once. It returns how long the claimer should wait
// before its next claim: when every row went to destinations that are down
// or full, until the soonest of them may take rows again; else 0.
func (e *Engine) dispatch(ctx context.Context, c *claim) (pause time.Duration) {
	// A claim that took more than half the lease (it waited long for the
	// claim turn) has little of its lease left by the engine's count,
	// which starts when the claim was sent: one renewal first vouches for
	// it anew. If that fails, nothing is published and the rows are
	// released.
	if time.Since(c.sent) > e.opt.Lease/2 && !e.confirmLease(ctx, c) {
		for i := range c.msgs {
			e.settler.add(outcome{claim: c, msg: &c.msgs[i], err: errLeaseUnconfirmed, cut: true})
		}
		return 0
	}
	parts := make(map[string][]*outbox.Message)
	for i := range c.msgs {
		m := &c.msgs[i]
		if m.Malformed != nil {
			e.settler.add(outcome{claim: c, msg: m, err: outbox.Permanent(m.Malformed)})
			continue
		}
		dest, err := e.router.Route(m)
		if err == nil {
			if _, ok := e.lanes[dest]; !ok {
				err = outbox.Permanent(fmt.Errorf("route names destination %q, which is not configured", dest))
			}
		}
		if err != nil {
			e.settler.add(outcome{claim: c, msg: m, dest: dest, err: err})
			continue
		}
		parts[dest] = append(parts[dest], m)
	}
	held, all := time.Duration(0), len(parts) > 0
	for dest, msgs := range parts {
		wait := e.lanes[dest].offer(c, msgs)
		if wait <= 0 {
			all = false
		} else if held == 0 || wait < held {
			held = wait
		}
	}
	if all {
		return min(max(held, e.opt.PollInterval), e.opt.MaxPollInterval)
	}
	return 0
}

// errLeaseUnconfirmed is the outcome of a row not published because its
// lease could not be confirmed after a slow claim (confirmLease).
var errLeaseUnconfirmed = errors.New("not published: the lease of a slow claim could not be confirmed")
