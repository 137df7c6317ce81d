package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// Router decides the destination of a row. It may replace msg.Payload (a
// transform); the stored row is never changed. An error wrapping
// outbox.ErrNoRoute, or any permanent error, dead-letters the row at once.
type Router interface {
	Route(msg *outbox.Message) (destination string, err error)
}

// Options tune the engine. Zero values take the documented defaults.
type Options struct {
	BatchSize       int           // rows per claim (100)
	InflightBatches int           // claim-publish-settle loops side by side (2)
	PollInterval    time.Duration // wait after an empty claim (100ms)
	MaxPollInterval time.Duration // idle polling backs off up to this (1s; = PollInterval disables backoff)
	Lease           time.Duration // claim lease, renewed every Lease/3 while publishing (30s)
	MaxAttempts     int           // used when a row carries no max_attempts (5)
	Backoff         Backoff
	ShutdownTimeout time.Duration // time to finish in-flight batches on shutdown (10s)
	ReapInterval    time.Duration // how often expired leases are released (5s)
	ReapBatch       int           // rows per release-expired statement (1000)
	Breaker         BreakerOptions
	Logger          *slog.Logger
	Observer        Observer
	// Secrets are literal values (passwords, tokens) removed from every
	// last_error written to the table, on top of the pattern-based
	// redaction of URLs and credentials.
	Secrets []string
	// Wake, when set, delivers a signal whenever new rows may be ready (a
	// PostgreSQL NOTIFY, say); idle workers claim at once instead of waiting
	// for the next poll.
	Wake <-chan struct{}
	// Arm, when set beside Wake, is called when the last busy worker falls
	// idle (an empty claim while the others sleep): it asks producers to
	// notify from now on (on PostgreSQL, producers notify only while a
	// relay sleeps, because NOTIFY serialises their commits). Its answer
	// (Arming) decides how the worker sleeps; an error is logged, and the
	// worker polls as it would without a wake source.
	Arm func(ctx context.Context) (Arming, error)
}

// Arming is the answer of Options.Arm.
type Arming int

const (
	// ArmUnavailable: producers may commit without notifying and nothing
	// would tell this relay (the wake source is down or shutting down, or
	// another relay's arming covers this one and may end without a
	// signal). The worker polls as it would without a wake source: every
	// PollInterval for the first second of quiet, then backing off.
	ArmUnavailable Arming = iota
	// ArmWatched: producers notify from now on (this relay holds the
	// arming), or will once a request that is queued is granted, and the
	// wake source signals Wake when that ends (a grant, a lost arming, a
	// hand-over). Polling is only the safety net: the worker sleeps
	// MaxPollInterval at once.
	ArmWatched
	// ArmFresh: this call armed the wake (or queued the request behind
	// producers that did not notify). Rows committed without a
	// notification before it are visible now, so the worker claims once
	// more (not as a poll) before it sleeps.
	ArmFresh
)

func (o *Options) setDefaults() {
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.InflightBatches <= 0 {
		o.InflightBatches = 2
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	if o.MaxPollInterval < o.PollInterval {
		o.MaxPollInterval = max(o.PollInterval, time.Second)
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	o.Backoff.setDefaults()
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.ReapInterval <= 0 {
		o.ReapInterval = 5 * time.Second
	}
	if o.ReapBatch <= 0 {
		o.ReapBatch = 1000
	}
	o.Breaker.setDefaults()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
}

// Engine relays outbox rows to destinations. Create it with New and start it
// with Run.
type Engine struct {
	db     dialect.Dialect
	router Router
	dests  map[string]destination.Destination
	opt    Options
	log    *slog.Logger
	obs    Observer
	// breakers holds one circuit breaker per destination.
	breakers map[string]*breaker
	policy   *claimPolicy
	share    *turnShare // how many workers claim (turnShare)

	armFailing atomic.Bool   // Options.Arm failed last time (logged once)
	claimFails claimFailures // the log of failed claims
	awake      atomic.Int32  // workers not asleep after an empty claim (Options.Arm)
	wakeMu     sync.Mutex
	wakeCh     chan struct{} // closed and replaced to wake every idle worker
}

// New returns an engine that claims through db, routes with r and publishes
// to dests (by destination name).
func New(db dialect.Dialect, r Router, dests map[string]destination.Destination, opt Options) (*Engine, error) {
	if db == nil || r == nil {
		return nil, errors.New("relay: a dialect and a router are required")
	}
	opt.setDefaults()
	breakers := make(map[string]*breaker, len(dests))
	for name := range dests {
		breakers[name] = newBreaker(opt.Breaker)
	}
	e := &Engine{
		db:       db,
		router:   r,
		dests:    dests,
		opt:      opt,
		log:      opt.Logger,
		obs:      opt.Observer,
		breakers: breakers,
		policy:   newClaimPolicy(opt.BatchSize, opt.InflightBatches),
		share:    newTurnShare(opt.InflightBatches),
		wakeCh:   make(chan struct{}),
	}
	if t, ok := db.(dialect.ClaimTurnReporter); ok && opt.InflightBatches > 1 {
		t.OnClaimTurn(e.turnQueued)
	}
	return e, nil
}

// Options returns the effective options, defaults applied.
func (e *Engine) Options() Options { return e.opt }

// Run relays until ctx ends. It then stops claiming, finishes or releases
// the batches in flight (within ShutdownTimeout) and returns nil. It returns
// an error only when it could not start.
func (e *Engine) Run(ctx context.Context) error {
	e.policy.startWideClock()
	var wg sync.WaitGroup
	e.awake.Store(int32(e.opt.InflightBatches))
	e.obs.ClaimWorkers(e.share.workers())
	wg.Add(e.opt.InflightBatches + 1)
	for i := 0; i < e.opt.InflightBatches; i++ {
		go func() {
			defer wg.Done()
			e.worker(ctx, i)
		}()
	}
	go func() {
		defer wg.Done()
		e.reaper(ctx)
	}()
	if e.opt.Wake != nil {
		go e.forwardWake(ctx)
	}
	wg.Wait()
	return nil
}

func (e *Engine) forwardWake(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-e.opt.Wake:
			if !ok {
				return
			}
			e.wakeAll()
		}
	}
}

// wakeAll wakes every worker that is waiting for its next poll.
func (e *Engine) wakeAll() {
	e.wakeMu.Lock()
	close(e.wakeCh)
	e.wakeCh = make(chan struct{})
	e.wakeMu.Unlock()
}

func (e *Engine) wakeChan() <-chan struct{} {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	return e.wakeCh
}

// worker is one claim-publish-settle loop.
func (e *Engine) worker(ctx context.Context, id int) {
	log := e.log.With("worker", id)
	empty := 0     // consecutive claims that found nothing
	armed := false // the wake was just armed: the next claim must run
	for ctx.Err() == nil {
		if id >= e.share.workers() {
			// Left out while the claim turn is saturated (turnShare);
			// back, it claims at once. Fresh from arming, it owed the
			// table one more claim (ArmFresh): a worker that still claims
			// makes it.
			if armed {
				e.wakeAll()
			}
			e.sitOut(ctx, log, id)
			empty, armed = 0, false
			continue
		}
		wake := e.wakeChan()
		// A claim right after a fresh arming is not a poll: a poll may skip
		// while another relay claims, and this one must see the rows of
		// producers that did not notify.
		n, full, pause, err := e.runBatch(ctx, log, empty > 0 && !armed)
		armed = false
		if err == nil {
			e.claimFails.ok(e.log)
		}
		if n > 0 && id >= e.share.workers() {
			// This batch's claim left this worker out (turnShare): the
			// keys it held are free again, and the workers that still
			// claim may be asleep, their polls backed off.
			e.wakeAll()
		}
		if pause > 0 {
			// Every row of the batch was deferred: its destination is
			// down. Claiming again at once would take the same rows on a
			// table that cannot hold them back (no scheduledAt).
			if !sleep(ctx, nil, pause) && ctx.Err() != nil {
				return
			}
		}
		switch {
		case err != nil:
			empty++
			if ctx.Err() != nil {
				return
			}
			e.claimFails.failed(e.log, err, e.idleWait(id, empty))
		case full:
			// A full batch: more rows are probably ready. Claim again at
			// once, and let idle siblings help, unless their last claims
			// beside a batch in flight found nothing (claimPolicy.barren).
			empty = 0
			if e.policy.wakeSiblings() && e.share.workers() > 1 {
				e.wakeAll()
			}
			continue
		case n > 0:
			// A partial batch: this worker claims again as soon as it is
			// done (its rows' keys are free again then), but siblings are
			// not woken: they would find the same heads in flight and scan
			// for nothing.
			empty = 0
			continue
		default:
			empty++
		}
		// With a wake source, the last worker to fall idle asks producers
		// to notify (Options.Arm). The others sleep without: a busy worker
		// claims again before it sleeps, so it arms in time, and producers
		// do not notify while any worker is busy.
		idle := err == nil && e.opt.Arm != nil
		wait := e.idleWait(id, empty)
		if idle && e.awake.Add(-1) == 0 {
			switch e.arm(ctx, log) {
			case ArmFresh:
				e.awake.Add(1)
				armed = true
				continue // producers notify from now on: claim what came before
			case ArmWatched:
				// Producers notify while this worker sleeps: no quick
				// polls after a burst, only the safety net.
				wait = e.opt.MaxPollInterval
			}
		}
		woken := !sleep(ctx, wake, wait)
		if idle {
			e.awake.Add(1)
		}
		if woken {
			// Woken: new rows may be ready.
			empty = 0
		}
	}
}

// turnQueued learns whether a claim queued for the table's claim turn
// (dialect.ClaimTurnReporter) and applies turnShare's decision.
func (e *Engine) turnQueued(queued bool) {
	from, to := e.share.report(queued)
	switch {
	case to < from:
		e.log.Info(LogFewerWorkers,
			"claiming_workers", to, "inflight_batches", e.opt.InflightBatches)
	case to > from:
		e.log.Info(LogMoreWorkers,
			"claiming_workers", to, "inflight_batches", e.opt.InflightBatches)
	default:
		return
	}
	e.obs.ClaimWorkers(to)
}

// sitOut parks worker id while turnShare leaves it out, until the count of
// claiming workers rises or ctx ends. Parked, it counts as asleep for
// Options.Arm: when it is the last worker to fall asleep it arms, as an idle
// worker would, and wakes the others to claim what came before.
func (e *Engine) sitOut(ctx context.Context, log *slog.Logger, id int) {
	raised := e.share.raised()
	if id < e.share.workers() {
		return // raised between the caller's check and now
	}
	if e.opt.Arm != nil {
		if e.awake.Add(-1) == 0 && e.arm(ctx, log) == ArmFresh {
			e.wakeAll()
		}
		defer e.awake.Add(1)
	}
	select {
	case <-raised:
	case <-ctx.Done():
	}
}

// arm asks producers to notify before the worker sleeps (Options.Arm).
func (e *Engine) arm(ctx context.Context, log *slog.Logger) Arming {
	a, err := e.opt.Arm(ctx)
	switch {
	case err == nil:
		e.armFailing.Store(false)
		return a
	case ctx.Err() == nil && !e.armFailing.Swap(true): // once per spell of failures
		log.Warn("wake on commit: could not ask producers to notify; polling until it works again", "err", err)
	}
	return ArmUnavailable
}

// idleWait is how long a worker waits after empty consecutive claims that
// found nothing. Worker 0 polls every PollInterval for the first second of
// quiet, then backs off, doubling up to MaxPollInterval: an empty table
// costs a few queries per second, and a burst after a quiet spell waits at
// most MaxPollInterval (or nothing, with a Wake source). The other workers
// only poll every MaxPollInterval while idle: a worker that claims a full
// batch wakes them.
func (e *Engine) idleWait(id, empty int) time.Duration {
	if id > 0 {
		return e.opt.MaxPollInterval
	}
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

// sleep waits d, or until wake is closed, or ctx ends. It reports whether
// the full duration passed.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return false
	case <-t.C:
		return true
	}
}

// runBatch claims one batch and carries it to the end. It returns the
// number of rows claimed, and whether the claim took as many as it asked for.
// poll marks a claim after an empty one that nothing woke since
// (dialect.ClaimParams.Poll): it skips, as an empty claim, when another
// relay's claim holds the table's claim turn.
//
// pause is settle's: how long to wait before the next claim.
func (e *Engine) runBatch(ctx context.Context, log *slog.Logger, poll bool) (n int, full bool, pause time.Duration, err error) {
	// The claims of one engine take turns (claimPolicy.turn); shutdown
	// ends the wait.
	if !e.policy.takeTurn(ctx.Done()) {
		return 0, false, 0, nil
	}
	token := uuid.NewString()
	start := time.Now()
	// The claim is not cancelled by shutdown: a claim the server committed
	// but whose answer was dropped would leave rows processing until their
	// lease expired. A claimed batch is then delivered within the shutdown
	// window like any other.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Lease)
	siblings, limit := e.policy.inflight.Load(), e.policy.claimLimit()
	msgs, err := e.claim(claimCtx, token, limit, poll)
	cancel()
	e.policy.releaseTurn()
	if errors.Is(err, dialect.ErrClaimTurnBusy) {
		return 0, false, 0, nil // a skipped poll: it ran nothing and teaches nothing
	}
	if err == nil {
		e.policy.claimed(len(msgs), limit, siblings)
	}
	e.obs.Claimed(len(msgs), limit, time.Since(start), err)
	if err != nil {
		return 0, false, 0, fmt.Errorf("claim: %w", err)
	}
	if len(msgs) == 0 {
		return 0, false, 0, nil
	}
	e.policy.inflight.Add(1)
	defer e.policy.inflight.Add(-1)
	pause = e.deliver(ctx, log, token, msgs, start)
	return len(msgs), len(msgs) >= limit, pause, nil
}

// outcome is what happened to one claimed row.
type outcome struct {
	msg  *outbox.Message
	dest string
	err  error // nil: delivered
	// deferred: the destination as a whole was unavailable (its circuit is
	// open, or every message of the publish failed at the connection
	// level); the row waits without spending an attempt.
	deferred bool
}

// deliver routes, publishes and settles one claimed batch, and returns
// settle's pause.
//
// claimed is when the claim was sent: the lease runs from a moment after it.
func (e *Engine) deliver(ctx context.Context, log *slog.Logger, token string, msgs []outbox.Message, claimed time.Time) (pause time.Duration) {
	// Publishing continues past ctx's end until the shutdown deadline, so
	// that a SIGTERM finishes the batch instead of abandoning it.
	pubCtx, cancelPub := e.shutdownContext(ctx)
	defer cancelPub()

	// renewLoop stops the publish once the lease can no longer be vouched
	// for, counting from when the claim was sent: the only moment known to
	// come before the database set the lease. A claim that took more than
	// half the lease (it waited long for the claim turn) would leave the
	// publish little or no time by that count, though its lease is fresh:
	// one renewal, before anything is published, vouches for it anew. If
	// that fails, nothing is published and the rows are released.
	var leaseLost atomic.Bool
	if time.Since(claimed) > e.opt.Lease/2 {
		if at, ok := e.confirmLease(pubCtx, log, token, len(msgs)); ok {
			claimed = at
		} else {
			leaseLost.Store(true)
		}
	}
	renewDone := make(chan struct{})
	renewStopped := make(chan struct{})
	go func() {
		defer close(renewStopped)
		if leaseLost.Load() {
			return
		}
		e.renewLoop(pubCtx, log, token, len(msgs), claimed, renewDone, func() {
			leaseLost.Store(true)
			cancelPub()
		})
	}()

	outcomes := make([]outcome, len(msgs))
	groups := make(map[string][]int)
	for i := range msgs {
		m := &msgs[i]
		outcomes[i].msg = m
		if m.Malformed != nil {
			outcomes[i].err = outbox.Permanent(m.Malformed)
			continue
		}
		dest, err := e.router.Route(m)
		if err != nil {
			outcomes[i].err = err
			continue
		}
		if _, ok := e.dests[dest]; !ok {
			outcomes[i].err = outbox.Permanent(fmt.Errorf("route names destination %q, which is not configured", dest))
			continue
		}
		outcomes[i].dest = dest
		groups[dest] = append(groups[dest], i)
	}

	if leaseLost.Load() {
		for _, idx := range groups {
			for _, i := range idx {
				outcomes[i].err = errLeaseUnconfirmed
			}
		}
		clear(groups)
	}
	var wg sync.WaitGroup
	for name, idx := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.publish(pubCtx, name, idx, outcomes)
		}()
	}
	wg.Wait()
	close(renewDone)
	<-renewStopped

	// Rows whose publish was cut short, by shutdown or because the lease
	// could not be kept (renewLoop), go back to pending without spending
	// an attempt: neither is the row's fault. Those another relay took
	// meanwhile are not touched (the release is fenced on the token).
	cut := (ctx.Err() != nil && pubCtx.Err() != nil) || leaseLost.Load()
	report, pause := e.settle(log, token, outcomes, cut)
	if c, ok := e.db.(dialect.BatchCommitter); ok {
		// Lock mode: the settling writes become visible only now.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Lease)
		err := c.Commit(cctx, token)
		cancel()
		if err != nil {
			log.Error("batch not committed: its rows stay pending and are delivered again (same ids)", "token", token, "rows", len(msgs), "err", err)
			report(false)
			// The rows are due again at once: claiming them again without
			// a pause would repeat whatever failed as fast as it fails.
			return min(max(e.opt.Backoff.Base, e.opt.PollInterval), e.opt.MaxPollInterval)
		}
	}
	report(true)
	return pause
}

// shutdownContext returns a context that ends ShutdownTimeout after ctx
// ends.
func (e *Engine) shutdownContext(ctx context.Context) (context.Context, context.CancelFunc) {
	pubCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(e.opt.ShutdownTimeout, cancel)
		context.AfterFunc(pubCtx, func() { t.Stop() })
	})
	return pubCtx, func() {
		stop()
		cancel()
	}
}

func (e *Engine) publish(ctx context.Context, name string, idx []int, outcomes []outcome) {
	b := e.breakers[name]
	if ok, wait := b.allow(); !ok {
		// The destination is down: do not publish, and do not spend an
		// attempt. The rows are due again when a probe may go through.
		err := circuitOpenError(wait)
		for _, i := range idx {
			outcomes[i].err, outcomes[i].deferred = err, true
		}
		return
	}
	batch := make([]outbox.Message, len(idx))
	for j, i := range idx {
		batch[j] = *outcomes[i].msg
	}
	start := time.Now()
	err := e.dests[name].Publish(ctx, batch)
	e.obs.Published(name, len(batch), time.Since(start), err)
	now := time.Now()
	errs := make([]error, len(idx))
	for j, i := range idx {
		errs[j] = destination.ErrorAt(err, j)
		outcomes[i].err = errs[j]
		// A row without a created_at value (NULL or infinite on an
		// adopted table: the zero time) has no latency to report.
		if created := outcomes[i].msg.CreatedAt; errs[j] == nil && !created.IsZero() {
			e.obs.Acked(name, now.Sub(created))
		}
	}
	if ctx.Err() != nil && err != nil {
		// Cut short by shutdown: says nothing about the destination.
		b.abandon()
		return
	}
	down := batchUnavailable(errs)
	if down {
		// The destination as a whole failed, not these rows: they wait
		// without spending an attempt. A connection-level error of some
		// messages while others went through says nothing of the kind and
		// spends attempts like any failure.
		for _, i := range idx {
			outcomes[i].deferred = true
		}
	}
	if from, to := b.record(down); from != to {
		e.obs.BreakerChanged(name, to)
		if to == BreakerOpen {
			e.log.Warn("circuit opened: the destination keeps failing at the connection level; its rows wait without spending attempts",
				"destination", name, "err", errs[0])
		} else {
			e.log.Info("circuit "+to.String(), "destination", name)
		}
	}
}

// errLeaseUnconfirmed is the outcome of a row not published because its
// lease could not be confirmed after a slow claim (confirmLease).
var errLeaseUnconfirmed = errors.New("not published: the lease of a slow claim could not be confirmed")

// confirmLease renews the batch's lease once, before its publish, and
// returns when the renewal was sent; false when it failed or found fewer
// rows than the batch claimed.
func (e *Engine) confirmLease(ctx context.Context, log *slog.Logger, token string, rows int) (time.Time, bool) {
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, e.opt.Lease/3)
	n, err := e.db.Renew(rctx, dialect.RenewParams{Token: token, Lease: e.opt.Lease})
	cancel()
	if err != nil || n < int64(rows) {
		log.Warn("a slow claim's lease could not be confirmed: its rows are released without being published (same ids, no attempt spent)",
			"token", token, "rows", rows, "still_held", n, "err", err)
		return time.Time{}, false
	}
	return sent, true
}

// leaseMargin is the part of the lease that renewLoop leaves unused: when
// no renewal has succeeded for Lease − Lease/leaseMargin, the publish stops
// (lost), before another relay may reclaim the rows.
const leaseMargin = 6

// renewLoop extends the batch's lease every Lease/3 until done is closed.
// It calls lost, and returns, when the lease cannot be kept:
//
//   - a renewal finds fewer of the batch's rows than it claimed (rows: the
//     others were reclaimed after their lease expired, and another relay
//     delivers them);
//   - no renewal has succeeded for Lease − Lease/leaseMargin since the
//     lease was last confirmed (claimed: when the claim was sent; then
//     when each successful renewal was sent, which is no later than the
//     database's clock set the lease). A relay that cannot reach its
//     database (a partition, a stalled pool) must not publish past the
//     lease: once it expires another relay's reaper returns the rows to
//     pending, that relay delivers them and then the key's next row, and
//     a copy published after that arrives out of order.
func (e *Engine) renewLoop(ctx context.Context, log *slog.Logger, token string, rows int, claimed time.Time, done <-chan struct{}, lost func()) {
	every, keep := e.opt.Lease/3, e.opt.Lease-e.opt.Lease/leaseMargin
	// A batch that ends at a fixed time (lock mode's lock timeout) stops
	// before it, whatever its renewals say.
	var hard time.Time
	if bd, ok := e.db.(dialect.BatchDeadliner); ok {
		if end, ok := bd.BatchDeadline(token); ok {
			hard = end.Add(-end.Sub(claimed) / leaseMargin)
		}
	}
	deadlineFrom := func(confirmed time.Time) time.Time {
		d := confirmed.Add(keep)
		if !hard.IsZero() && hard.Before(d) {
			d = hard
		}
		return d
	}
	confirmed := claimed
	deadline := deadlineFrom(confirmed)
	// Renewals run every Lease/3 counted from the last confirmation, not
	// from when the publish began: after a claim that took a while, the
	// first renewal comes sooner, and has its full share of time before
	// the deadline.
	next := func() time.Duration {
		return max(min(time.Until(confirmed.Add(every)), time.Until(deadline)), 0)
	}
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			if deadline.Equal(hard) {
				log.Warn("the batch's lock timeout is near: the publish is stopped; its rows stay pending and are delivered again (same ids); raise relay.lockTimeout above the longest publish",
					"token", token, "rows", rows)
			} else {
				log.Warn("lease not renewed in time: the publish is stopped before the lease expires; its rows go back to pending, or to the relay that reclaims them (same ids)",
					"token", token, "lease", e.opt.Lease, "unconfirmed_for", time.Since(confirmed).Round(time.Millisecond))
			}
			lost()
			return
		}
		// Each renewal gets a third of the lease, and never runs past the
		// deadline: a connection that hangs must not keep the batch from
		// its next try, or the publish from stopping in time.
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, min(every, time.Until(deadline)))
		n, err := e.db.Renew(rctx, dialect.RenewParams{Token: token, Lease: e.opt.Lease})
		cancel()
		switch {
		case err != nil:
			// Try again soon: two failures a third of a lease apart
			// would come close to the deadline.
			retry := max(every/4, 100*time.Millisecond)
			log.Warn("lease renewal failed; retrying before the lease expires", "token", token, "err", err, "retry_in", retry)
			t.Reset(max(min(retry, time.Until(deadline)), 0))
			continue
		case n < int64(rows):
			// Rows of the batch were reclaimed after their lease expired
			// (n == 0: all of them): another relay delivers them.
			// Publishing on would send them again, possibly after that
			// relay has sent the key's next row.
			log.Warn("lease lost during publish: the publish is stopped; another relay delivers these rows (same ids)", "token", token, "rows", rows, "still_held", n)
			lost()
			return
		}
		confirmed, deadline = sent, deadlineFrom(sent)
		t.Reset(next())
	}
}
