package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/dialect"
)

// RetentionOptions configure RunRetention. A zero max age keeps that state's
// rows forever.
type RetentionOptions struct {
	SentMaxAge time.Duration // delete sent rows last updated longer ago than this
	DeadMaxAge time.Duration // delete dead rows last updated longer ago than this
	Interval   time.Duration // between passes (1m)
	BatchSize  int           // rows per delete statement (1000)
	Pause      time.Duration // between two statements of one pass, so vacuum and writers keep up (50ms)
	Logger     *slog.Logger
	Observer   RetentionObserver
}

// RetentionObserver receives the rows deleted by retention, for metrics.
type RetentionObserver interface {
	Purged(state string, rows int)
}

func (o *RetentionOptions) setDefaults() {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 1000
	}
	if o.Pause < 0 {
		o.Pause = 0
	} else if o.Pause == 0 {
		o.Pause = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// RunRetention deletes old sent and dead rows until ctx ends: one pass at
// start and then every Interval, each pass a loop of short DELETE
// statements of at most BatchSize rows with a Pause in between, so that no
// statement holds many locks or runs long and delivery goes on. Pending and
// processing rows are never touched (the dialect refuses them). Errors are
// logged and the pass is retried at the next interval. It returns when ctx
// ends.
func RunRetention(ctx context.Context, db dialect.Purger, opt RetentionOptions) {
	opt.setDefaults()
	if opt.SentMaxAge <= 0 && opt.DeadMaxAge <= 0 {
		return
	}
	t := time.NewTicker(opt.Interval)
	defer t.Stop()
	for {
		for _, s := range []struct {
			state  string
			maxAge time.Duration
		}{{"sent", opt.SentMaxAge}, {"dead", opt.DeadMaxAge}} {
			if s.maxAge > 0 {
				purgeState(ctx, db, opt, s.state, s.maxAge)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RetentionPass runs one pass for one state and returns how many rows it
// deleted: statements of BatchSize rows until one deletes fewer.
func RetentionPass(ctx context.Context, db dialect.Purger, opt RetentionOptions, state string, maxAge time.Duration) (int64, error) {
	opt.setDefaults()
	var total int64
	for ctx.Err() == nil {
		n, err := db.Purge(ctx, dialect.PurgeParams{State: state, OlderThan: maxAge, Limit: opt.BatchSize})
		if n > 0 {
			total += n
			if opt.Observer != nil {
				opt.Observer.Purged(state, int(n))
			}
		}
		if err != nil {
			return total, err
		}
		if n < int64(opt.BatchSize) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(opt.Pause):
		}
	}
	return total, ctx.Err()
}

func purgeState(ctx context.Context, db dialect.Purger, opt RetentionOptions, state string, maxAge time.Duration) {
	start := time.Now()
	n, err := RetentionPass(ctx, db, opt, state, maxAge)
	switch {
	case err != nil && ctx.Err() == nil:
		opt.Logger.Warn("retention pass failed; retrying at the next interval", "state", state, "deleted", n, "err", err)
	case n > 0:
		opt.Logger.Info("retention pass", "state", state, "deleted", n, "max_age", maxAge, "took", time.Since(start).Round(time.Millisecond))
	}
}
