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
