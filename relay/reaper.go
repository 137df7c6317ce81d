package relay

import (
	"context"
	"time"

	"github.com/queuebox/queuebox/dialect"
)

// reaper returns rows whose lease expired (a relay that crashed or stalled)
// to pending, every ReapInterval. It drains all expired rows in batches of
// ReapBatch each round, so a crashed batch comes back at once, not a few
// rows per period.
func (e *Engine) reaper(ctx context.Context) {
	t := time.NewTicker(e.opt.ReapInterval)
	defer t.Stop()
	for {
		e.reap(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Engine) reap(ctx context.Context) {
	var total int64
	for ctx.Err() == nil {
		n, err := e.db.ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: e.opt.ReapBatch})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("releasing expired leases failed; will try again", "err", err)
			}
			break
		}
		total += n
		if n < int64(e.opt.ReapBatch) {
			break
		}
	}
	if total > 0 {
		e.obs.Reclaimed(int(total))
		e.log.Info("released rows whose lease expired", "rows", total)
		e.wakeAll()
	}
}
