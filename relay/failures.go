package relay

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// failLogEvery is how often a spell of failed claims logs again after its
// first line.
const failLogEvery = 30 * time.Second

// claimFailures keeps the log of an engine's failed claims readable through
// an outage: while the database is away every worker retries every poll
// (ten times a second at first), and a line per retry would bury the one
// that says why. The first failure of a spell is logged at once; then one
// line per failLogEvery, with the failures since the last and the latest
// error; the first claim that works again logs how many failed and for how
// long.
type claimFailures struct {
	failing atomic.Bool // a spell is on: the fast path of ok

	mu       sync.Mutex
	start    time.Time // first failure of the spell
	logged   time.Time // last line
	count    int       // failures in the spell
	unlogged int       // failures since the last line
	now      func() time.Time
}

func (f *claimFailures) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// failed records a failed claim and logs it when due.
func (f *claimFailures) failed(log *slog.Logger, err error, retryIn time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock()
	f.count++
	f.unlogged++
	switch {
	case !f.failing.Load():
		f.failing.Store(true)
		f.start, f.logged, f.count, f.unlogged = now, now, 1, 0
		log.Error("claim failed; retrying", "err", err, "retry_in", retryIn)
	case now.Sub(f.logged) >= failLogEvery:
		log.Error("claims still failing; retrying", "err", err, "failed_claims", f.unlogged,
			"failing_for", now.Sub(f.start).Round(time.Second))
		f.logged, f.unlogged = now, 0
	}
}

// ok ends a spell of failures, if one is on, and logs its end.
func (f *claimFailures) ok(log *slog.Logger) {
	if !f.failing.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing.Load() {
		return
	}
	f.failing.Store(false)
	log.Info("claims work again", "failed_claims", f.count, "failed_for", f.clock().Sub(f.start).Round(time.Millisecond))
}
