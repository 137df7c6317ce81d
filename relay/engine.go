package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	BatchSize int // rows per claim (100)
	// MaxInflight bounds the rows this engine holds claimed and not yet
	// settled, across every destination (10 × BatchSize). No destination
	// holds more than three quarters of it while others are configured.
	MaxInflight int
	// Concurrency is the hard cap of rows in flight to one destination
	// (0: MaxInflight). Below it each destination's limit adapts to how
	// the destination answers (limiter). DestinationConcurrency overrides
	// it per destination name.
	Concurrency            int
	DestinationConcurrency map[string]int
	PollInterval           time.Duration // wait after an empty claim (100ms)
	MaxPollInterval        time.Duration // idle polling backs off up to this (1s; = PollInterval disables backoff)
	Lease                  time.Duration // claim lease, renewed every Lease/3 while rows of the claim are out (30s)
	MaxAttempts            int           // used when a row carries no max_attempts (5)
	Backoff                Backoff
	ShutdownTimeout        time.Duration // time to finish the rows in flight on shutdown (10s)
	ReapInterval           time.Duration // how often expired leases are released (5s)
	ReapBatch              int           // rows per release-expired statement (1000)
	Breaker                BreakerOptions
	Logger                 *slog.Logger
	Observer               Observer
	// Secrets are literal values (passwords, tokens) removed from every
	// last_error written to the table, on top of the pattern-based
	// redaction of URLs and credentials.
	Secrets []string
	// Wake, when set, delivers a signal whenever new rows may be ready (a
	// PostgreSQL NOTIFY, say); an idle engine claims at once instead of
	// waiting for the next poll.
	Wake <-chan struct{}
	// Arm, when set beside Wake, is called when the engine falls idle (a
	// claim found nothing and no row is in flight): it asks producers to
	// notify from now on (on PostgreSQL, producers notify only while a
	// relay sleeps, because NOTIFY serialises their commits). Its answer
	// (Arming) decides how the engine sleeps; an error is logged, and the
	// engine polls as it would without a wake source.
	Arm func(ctx context.Context) (Arming, error)
	// Tracer, when set, follows each row through its publish (tracing);
	// nil: nothing is traced and the publish path does no extra work.
	Tracer Tracer
}

// Tracer follows rows through their publish. Start is called for each row
// just before it is published to the destination dest, with the engine's
// own copy of the row: it may give m a new Headers map (a trace context
// for the receiver), never change the map m holds, which is the claimed
// row's. The engine calls the returned end exactly once, with the row's
// outcome (nil: the destination took it).
type Tracer interface {
	Start(ctx context.Context, dest string, m *outbox.Message) (end func(err error))
}

// Arming is the answer of Options.Arm.
type Arming int

const (
	// ArmUnavailable: producers may commit without notifying and nothing
	// would tell this relay (the wake source is down or shutting down, or
	// another relay's arming covers this one and may end without a
	// signal). The engine polls as it would without a wake source: every
	// PollInterval for the first second of quiet, then backing off.
	ArmUnavailable Arming = iota
	// ArmWatched: producers notify from now on (this relay holds the
	// arming), or will once a request that is queued is granted, and the
	// wake source signals Wake when that ends (a grant, a lost arming, a
	// hand-over). Polling is only the safety net: the engine sleeps
	// MaxPollInterval at once.
	ArmWatched
	// ArmFresh: this call armed the wake (or queued the request behind
	// producers that did not notify). Rows committed without a
	// notification before it are visible now, so the engine claims once
	// more (not as a poll) before it sleeps.
	ArmFresh
)

func (o *Options) setDefaults() {
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 10 * o.BatchSize
	}
	o.MaxInflight = max(o.MaxInflight, o.BatchSize)
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

// concurrency is the hard cap of rows in flight to the destination name.
func (o *Options) concurrency(name string) int {
	if n := o.DestinationConcurrency[name]; n > 0 {
		return min(n, o.MaxInflight)
	}
	if o.Concurrency > 0 {
		return min(o.Concurrency, o.MaxInflight)
	}
	return o.MaxInflight
}

// Engine relays outbox rows to destinations. Create it with New and start it
// with Run.
type Engine struct {
	db      dialect.Dialect
	sweeper dialect.Sweeper        // nil: the dialect claims without a window
	commit  dialect.BatchCommitter // lock mode: each claim is a transaction
	router  Router
	opt     Options
	log     *slog.Logger
	obs     Observer

	lanes map[string]*lane // one per destination
	// inflight counts the rows claimed and not yet settled; the claimer
	// claims only while it is below MaxInflight.
	inflight atomic.Int64
	claims   *claimSet
	keys     keySet // keys with a row in flight here
	settler  *settler

	// changed is signalled when rows are settled: their keys and their
	// share of the budget are free, and the claimer may claim again.
	changed chan struct{}

	pauseUntil atomic.Int64  // unix ns: no claim before (pauseClaims)
	armFailing atomic.Bool   // Options.Arm failed last time (logged once)
	claimFails claimFailures // the log of failed claims
	wakeMu     sync.Mutex
	wakeCh     chan struct{} // closed and replaced to wake the idle claimer
}

// New returns an engine that claims through db, routes with r and publishes
// to dests (by destination name).
func New(db dialect.Dialect, r Router, dests map[string]destination.Destination, opt Options) (*Engine, error) {
	if db == nil || r == nil {
		return nil, errors.New("relay: a dialect and a router are required")
	}
	opt.setDefaults()
	e := &Engine{
		db:      db,
		router:  r,
		opt:     opt,
		log:     opt.Logger,
		obs:     opt.Observer,
		lanes:   make(map[string]*lane, len(dests)),
		claims:  newClaimSet(),
		keys:    keySet{m: map[string]keyRows{}},
		changed: make(chan struct{}, 1),
		wakeCh:  make(chan struct{}),
	}
	e.sweeper, _ = db.(dialect.Sweeper)
	e.commit, _ = db.(dialect.BatchCommitter)
	share := opt.MaxInflight
	if len(dests) > 1 {
		share = max(opt.MaxInflight*3/4, 1)
	}
	for name, d := range dests {
		e.lanes[name] = newLane(e, name, d, opt.concurrency(name), share)
	}
	e.settler = newSettler(e)
	return e, nil
}

// Options returns the effective options, defaults applied.
func (e *Engine) Options() Options { return e.opt }

// Run relays until ctx ends. It then stops claiming, finishes the rows in
// flight within ShutdownTimeout, releases what it could not finish without
// spending an attempt, and returns nil. It returns an error only when it
// could not start.
func (e *Engine) Run(ctx context.Context) error {
	// Publishing goes on past ctx's end until the shutdown deadline, so
	// that a SIGTERM finishes the rows in flight instead of abandoning
	// them; then every claim's context ends and what is left is released.
	pubCtx, cancelPub := e.shutdownContext(ctx)
	defer cancelPub()

	settled := make(chan struct{})
	go func() {
		defer close(settled)
		e.settler.run()
	}()
	var lanes sync.WaitGroup
	for _, l := range e.lanes {
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			l.run(pubCtx)
		}()
	}
	var background sync.WaitGroup
	background.Add(2)
	go func() {
		defer background.Done()
		e.reaper(ctx)
	}()
	go func() {
		defer background.Done()
		e.renewer(pubCtx)
	}()
	if e.opt.Wake != nil {
		go e.forwardWake(ctx)
	}

	e.claimLoop(ctx)

	// Shutdown: no more claims. Wait for the rows in flight to settle, or
	// for the shutdown deadline, after which the lanes release what they
	// hold and the publishes still out are cut (settled as releases).
	e.waitDrained(pubCtx)
	cancelPub()
	lanes.Wait()
	e.waitDrained(context.Background())
	e.settler.stop()
	<-settled
	background.Wait()
	return nil
}

// waitDrained returns once every claimed row is settled, or ctx ends.
func (e *Engine) waitDrained(ctx context.Context) {
	for e.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-e.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// signalChanged tells the claimer that rows were settled.
func (e *Engine) signalChanged() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
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

// wakeAll wakes the claimer if it waits for its next poll.
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
