package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

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
