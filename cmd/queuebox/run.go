package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/metrics"
	"github.com/queuebox/queuebox/redact"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
	"github.com/queuebox/queuebox/tracing"
)

func newRunCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the relay and its management server (/metrics, /health/live, /health/ready)",
		Long: `run claims outbox rows and delivers them to the configured destinations until
it receives SIGTERM or SIGINT. It then stops claiming, finishes the batches in
flight within relay.shutdownTimeout, releases what it could not finish, and
exits 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), g, cfg)
			if err != nil {
				return err
			}
			gc := setGCPercent(os.LookupEnv)
			log.Debug("garbage collector", "gogc", gc)
			return run(cmd.Context(), cfg, log)
		},
	}
}

// defaultGCPercent is the relay's GOGC when the environment sets none.
//
// The relay's live heap is small (a few MiB: the batches in flight), so at
// Go's default of 100 the collector runs every few MiB allocated, about
// every thousand rows, and was a fifth of the relay's CPU in a profile of
// the NATS drain. At 400 the relay spends 15–25 % less CPU per row, which
// on a host it shares with the database is throughput, for ~12 MiB more
// resident memory. GOGC in the
// environment overrides it, as for any Go program; GOMEMLIMIT caps the
// heap on top of it.
const defaultGCPercent = 400

// setGCPercent applies defaultGCPercent unless GOGC is set, and returns
// defaultGCPercent or the environment's value as spelled (the runtime has
// read it: "off", a number, or anything else, which it takes as 100).
func setGCPercent(lookupEnv func(string) (string, bool)) string {
	if v, ok := lookupEnv("GOGC"); ok && v != "" {
		return v
	}
	debug.SetGCPercent(defaultGCPercent)
	return strconv.Itoa(defaultGCPercent)
}

// relayRuntime is everything a running relay holds: the database, the
// destinations, the engine and its metrics.
type relayRuntime struct {
	cfg     *config.Config
	log     *slog.Logger
	db      *database
	dests   map[string]destination.Destination
	router  *router.Router
	engine  *relay.Engine
	metrics *metrics.Metrics
	// stopListen ends the wake-on-commit listener (relay.notify); nil
	// when it is off.
	stopListen func()
	// tracing follows each delivered row with a span when the OTEL_*
	// environment turns it on; Close flushes it.
	tracing *tracing.Tracing
}

// newRuntime connects to the database and every destination and builds the
// engine. On error, everything opened so far is closed.
func newRuntime(ctx context.Context, cfg *config.Config, log *slog.Logger) (_ *relayRuntime, err error) {
	rt := &relayRuntime{cfg: cfg, log: log, dests: map[string]destination.Destination{}, metrics: metrics.New()}
	b := currentBuild()
	rt.metrics.SetBuildInfo(b.Version, b.Revision, b.GoVersion)
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	rt.router, err = newRouter(cfg)
	if err != nil {
		return nil, err
	}
	rt.db, err = openDialectFor(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	if mode, notes := describePlan(rt.db.plan); mode != "" {
		log.Info("outbox table: "+mode, "table", cfg.Database.OutboxTable)
		for _, n := range notes {
			log.Info("outbox table: "+n, "table", cfg.Database.OutboxTable)
		}
		for _, n := range rt.db.plan.Warnings {
			log.Warn("outbox table: "+n, "table", cfg.Database.OutboxTable)
		}
	}
	if pg, ok := postgresDialect(rt.db.Dialect); ok {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		missing, err := pg.MissingIndexes(ictx)
		cancel()
		if err != nil {
			log.Warn("outbox table: could not read its indexes; run queuebox check", "table", cfg.Database.OutboxTable, "err", err)
		}
		for _, p := range missing {
			log.Warn("outbox table: "+p.What+"; fix: "+p.Fix, "table", cfg.Database.OutboxTable)
		}
	}
	for name, d := range cfg.Destinations {
		dest, err := openDestination(ctx, name, d, cfg, log, rt.metrics.RowHeaderDropped)
		if err != nil {
			return nil, fmt.Errorf("destinations.%s: %w", name, err)
		}
		rt.dests[name] = dest
		rt.metrics.InitDestination(name)
	}
	if pg, ok := postgresDialect(rt.db.Dialect); ok {
		pg.ObserveTurnWait(rt.metrics.ClaimTurnWaited)
	}
	// --- wake on commit (relay.notify, issue 8) ---
	wake, arm, err := rt.startWake(ctx)
	if err != nil {
		return nil, err
	}
	// --- end wake on commit ---
	if rt.tracing, err = setupTracing(ctx, cfg, log); err != nil {
		return nil, err
	}
	// The engine gets the dialect itself, not the database around it: it
	// asks the dialect for what it can do beyond dialect.Dialect
	// (dialect.BatchCommitter in lock mode), which a wrapper would hide.
	rt.engine, err = relay.New(rt.db.Dialect, rt.router, rt.dests, relay.Options{
		BatchSize:              cfg.Relay.BatchSize,
		MaxInflight:            cfg.Relay.MaxInflight,
		Concurrency:            cfg.Relay.Concurrency,
		DestinationConcurrency: destinationConcurrency(cfg),
		PollInterval:           cfg.Relay.PollInterval.D(),
		MaxPollInterval:        cfg.Relay.MaxPollInterval.D(),
		Lease:                  cfg.Relay.Lease.D(),
		MaxAttempts:            cfg.Relay.MaxAttempts,
		Backoff: relay.Backoff{
			Base:   cfg.Relay.Backoff.Base.D(),
			Max:    cfg.Relay.Backoff.Max.D(),
			Jitter: cfg.Relay.Backoff.Jitter,
		},
		ShutdownTimeout: cfg.Relay.ShutdownTimeout.D(),
		ReapInterval:    cfg.Relay.ReapInterval.D(),
		Breaker: relay.BreakerOptions{
			Failures:   cfg.Relay.CircuitBreaker.Failures,
			OpenFor:    cfg.Relay.CircuitBreaker.OpenFor.D(),
			MaxOpenFor: cfg.Relay.CircuitBreaker.MaxOpenFor.D(),
		},
		Logger:   log,
		Observer: rt.metrics,
		Secrets:  cfg.Secrets(),
		Wake:     wake,
		Arm:      arm,
		Tracer:   relayTracer(rt.tracing),
	})
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// startWake starts the LISTEN loop of relay.notify and returns its signal
// channel and the call that asks producers to notify before a worker
// sleeps (both nil when relay.notify.channel is empty). With createTrigger
// it first installs the NOTIFY trigger. The listener lives until Close,
// not until ctx (which only bounds the start).
func (rt *relayRuntime) startWake(ctx context.Context) (<-chan struct{}, func(context.Context) (relay.Arming, error), error) {
	n := rt.cfg.Relay.Notify
	if n.Channel == "" {
		return nil, nil, nil
	}
	pg, ok := postgresDialect(rt.db.Dialect)
	if !ok {
		return nil, nil, fmt.Errorf("relay.notify: wake on commit needs database.type postgresql (other databases poll)")
	}
	if n.CreateTrigger {
		if err := pg.EnsureNotifyTrigger(ctx, n.Channel); err != nil {
			return nil, nil, fmt.Errorf("relay.notify.createTrigger: %w", err)
		}
	}
	l, err := pg.NewListener(n.Channel, rt.log)
	if err != nil {
		return nil, nil, fmt.Errorf("relay.notify.channel: %w", err)
	}
	l.Observe(rt.metrics)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(lctx) }()
	// Stopping waits (briefly) for Run to hand the notify lock over, so
	// that a relay this one covered arms at once, not at its next look.
	rt.stopListen = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
	}
	rt.log.Info("wake on commit: listening", "channel", n.Channel, "trigger", n.CreateTrigger)
	arm := func(ctx context.Context) (relay.Arming, error) {
		fresh, watched, err := l.Arm(ctx)
		switch {
		case fresh:
			return relay.ArmFresh, err
		case watched:
			return relay.ArmWatched, err
		}
		return relay.ArmUnavailable, err
	}
	return l.C(), arm, nil
}

// Close closes the destinations and the database. It is idempotent.
func (rt *relayRuntime) Close() {
	if rt.stopListen != nil {
		rt.stopListen()
		rt.stopListen = nil
	}
	if rt.tracing != nil {
		// The spans of the last rows are still buffered: export them.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := rt.tracing.Shutdown(ctx); err != nil {
			rt.log.Warn("tracing: flushing spans at shutdown", "err", redact.String(err.Error(), rt.cfg.Secrets()...))
		}
		cancel()
		rt.tracing = nil
	}
	for name, d := range rt.dests {
		if err := d.Close(); err != nil {
			rt.log.Warn("closing destination", "destination", name, "err", err)
		}
	}
	rt.dests = map[string]destination.Destination{}
	if rt.db != nil {
		rt.db.Close()
		rt.db = nil
	}
}

// setupTracing reads the OTEL_* environment: tracing is off (and nothing
// is dialled) unless OTEL_TRACES_EXPORTER is set.
func setupTracing(ctx context.Context, cfg *config.Config, log *slog.Logger) (*tracing.Tracing, error) {
	systems := make(map[string]string, len(cfg.Destinations))
	for name, d := range cfg.Destinations {
		systems[name] = tracing.SystemOf(d.Type)
	}
	return tracing.Setup(ctx, tracing.Options{LookupEnv: os.LookupEnv, Systems: systems, Secrets: cfg.Secrets(),
		Version: currentBuild().Version, Logger: log})
}

// relayTracer is the engine's tracer: nil when tracing is off, so that the
// publish path does no tracing work.
func relayTracer(t *tracing.Tracing) relay.Tracer {
	if t == nil || !t.Enabled() {
		return nil
	}
	return t
}

func newRouter(cfg *config.Config) (*router.Router, error) {
	specs := make([]router.RouteSpec, len(cfg.Routes))
	for i, r := range cfg.Routes {
		specs[i] = router.RouteSpec{
			Pattern:     r.TopicPattern,
			Destination: r.Destination,
			When:        r.When,
			Transform:   r.Transform,
			OnError:     router.OnError(r.OnError),
		}
	}
	r, err := router.New(specs)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	rt, err := newRuntime(startCtx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	defer rt.Close()
	rt.warnDestinations(ctx)

	var srv *http.Server
	if cfg.Server.Listen != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Server.Listen)
		if err != nil {
			return fmt.Errorf("server.listen %s: %w (is another process using the port?)", cfg.Server.Listen, err)
		}
		srv = &http.Server{Handler: rt.managementHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("management server stopped", "err", err)
			}
		}()
		log.Info("management server listening", "addr", ln.Addr().String())
	}

	log.Info("relay started", "version", currentBuild().Version, "table", cfg.Database.OutboxTable, "destinations", len(rt.dests), "routes", len(cfg.Routes),
		"batch_size", cfg.Relay.BatchSize, "max_inflight", cfg.Relay.MaxInflight, "lease", cfg.Relay.Lease.D())
	stopInbox, err := startInbox(ctx, cfg, log, rt.metrics)
	if err != nil {
		return err
	}
	defer stopInbox()
	go rt.refreshBacklog(ctx)
	if p, ok := rt.db.Dialect.(dialect.Purger); ok && (cfg.Retention.Sent.MaxAge > 0 || cfg.Retention.Dead.MaxAge > 0) {
		go relay.RunRetention(ctx, p, relay.RetentionOptions{
			SentMaxAge: cfg.Retention.Sent.MaxAge.D(),
			DeadMaxAge: cfg.Retention.Dead.MaxAge.D(),
			Interval:   cfg.Retention.Interval.D(),
			BatchSize:  cfg.Retention.BatchSize,
			Logger:     log,
			Observer:   rt.metrics,
		})
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go rt.db.watchBucketMembers(ctx, bucketGuardInterval, stop)
	err = rt.engine.Run(ctx)
	if cause := context.Cause(ctx); err == nil && errors.As(cause, new(mixedModesError)) {
		err = cause // the guard stopped the relay: exit with its reason
	}
	log.Info("relay stopped")
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	return err
}

// duplicateWindower is implemented by destinations that deduplicate on the
// message id within a window (JetStream streams).
type duplicateWindower interface {
	DuplicateWindow(ctx context.Context) (time.Duration, error)
}

// streamWarner is implemented by destinations that can tell whether their
// messages have somewhere to be stored (JetStream: a stream covering the
// subject).
type streamWarner interface {
	StreamWarning(ctx context.Context) string
}

// warnDestinations logs, at the relay's start, what a destination cannot
// confirm about where its messages go (streamWarner), and a JetStream
// duplicate window too short for the redeliveries the relay may make.
func (rt *relayRuntime) warnDestinations(ctx context.Context) {
	for name, d := range rt.dests {
		if s, ok := d.(streamWarner); ok {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if w := s.StreamWarning(cctx); w != "" {
				rt.log.Warn(w, "destination", name)
			}
			cancel()
		}
	}
	rt.warnDuplicateWindow(ctx)
}

// warnDuplicateWindow warns when a redelivery after a crash (up to lease +
// reap interval later) could fall outside a JetStream stream's duplicate
// window, where it would arrive as a real duplicate.
func (rt *relayRuntime) warnDuplicateWindow(ctx context.Context) {
	gap := rt.cfg.Relay.Lease.D() + rt.cfg.Relay.ReapInterval.D()
	for name, d := range rt.dests {
		dw, ok := d.(duplicateWindower)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w, err := dw.DuplicateWindow(cctx)
		cancel()
		if err != nil || w <= 0 {
			continue
		}
		if w < gap {
			rt.log.Warn("the JetStream duplicate window is shorter than the redelivery gap after a crash: a redelivered message would be stored twice; raise the stream's duplicate window or lower relay.lease",
				"destination", name, "duplicate_window", w, "lease_plus_reap_interval", gap)
		}
		if maxBackoff := rt.cfg.Relay.Backoff.Max.D(); w < maxBackoff {
			rt.log.Warn("the JetStream duplicate window is shorter than relay.backoff.max: a retry after a lost acknowledgement may be stored twice",
				"destination", name, "duplicate_window", w, "backoff_max", maxBackoff)
		}
	}
}
