package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/redact"
	"github.com/queuebox/queuebox/outbox"
)

// Outcome names what the engine did with a row, for metrics and logs.
type Outcome string

// The outcomes of a delivery.
const (
	OutcomeSent     Outcome = "sent"
	OutcomeRetry    Outcome = "retry"
	OutcomeDead     Outcome = "dead"
	OutcomeReleased Outcome = "released"
	// OutcomeDeferred is a row whose destination was unavailable: it is
	// due again later and its attempt count is unchanged.
	OutcomeDeferred Outcome = "deferred"
)

// maxErrorLen bounds the last_error text written to the table.
const maxErrorLen = 1024

// settle writes the outcome of every row of a batch: one statement per kind
// of outcome. shutdownCut says the publish was cut short by shutdown, in
// which case failed rows are released rather than retried. It returns the
// function that reports the outcomes to the observer, to be called once
// they are durable.
//
// pause is how long the worker should wait before its next claim: when every
// row of the batch was deferred (its destination unavailable), the shortest
// deferral, at most MaxPollInterval; otherwise 0. A table without a
// scheduledAt column cannot hold the rows back, so without the pause the
// worker claimed the same rows again at once, for as long as the outage
// lasted (thousands of claims a second).
func (e *Engine) settle(log *slog.Logger, token string, outcomes []outcome, shutdownCut bool) (report func(committed bool), pause time.Duration) {
	var (
		sent    []string
		sentBy  = map[string]int{}
		retries []dialect.RetryItem
		retryBy = map[string]int{}
		// deferredBy counts rows whose destination was unavailable.
		deferredBy = map[string]int{}
		deferred   int
		minDefer   time.Duration
		deads      []dialect.DeadItem
		deadBy     = map[string]int{}
		released   []string
		// One log line per destination and batch for retries: a broker
		// that is down must not print a line per row.
		firstRetry = map[string]string{}
	)
	for i := range outcomes {
		o := &outcomes[i]
		m := o.msg
		if o.err == nil {
			sent = append(sent, m.ID)
			sentBy[o.dest]++
			continue
		}
		if shutdownCut && !outbox.IsPermanent(o.err) && !errors.Is(o.err, outbox.ErrNoRoute) {
			released = append(released, m.ID)
			continue
		}
		reason := e.reason(o)
		permanent := outbox.IsPermanent(o.err) || errors.Is(o.err, outbox.ErrNoRoute)
		maxAttempts := m.MaxAttempts
		if maxAttempts <= 0 {
			maxAttempts = e.opt.MaxAttempts
		}
		attempt := m.Attempt + 1
		attrs := []any{"id", m.ID, "topic", m.Topic, "key", m.Key, "destination", o.dest, "attempt", m.Attempt}
		switch {
		case o.deferred && !permanent:
			// The destination is down, not the row: wait without spending
			// an attempt, so that no row dies because a broker was away.
			delay := e.opt.Backoff.Base
			if d, ok := outbox.RetryDelay(o.err); ok {
				delay = min(max(d, 0), e.opt.Backoff.Max)
			}
			retries = append(retries, dialect.RetryItem{ID: m.ID, Attempt: m.Attempt, Delay: delay, Error: reason})
			deferredBy[o.dest]++
			if deferred == 0 || delay < minDefer {
				minDefer = delay
			}
			deferred++
			if firstRetry[o.dest] == "" {
				firstRetry[o.dest] = reason
			}
		case permanent:
			deads = append(deads, dialect.DeadItem{ID: m.ID, Attempt: attempt, Error: reason})
			deadBy[o.dest]++
			log.Warn("row dead: permanent failure", append(attrs, "err", reason)...)
		case attempt >= maxAttempts:
			deads = append(deads, dialect.DeadItem{ID: m.ID, Attempt: attempt, Error: reason})
			deadBy[o.dest]++
			log.Warn("row dead: attempts exhausted", append(attrs, "max_attempts", maxAttempts, "err", reason)...)
		default:
			delay := e.opt.Backoff.Delay(m.Attempt)
			if d, ok := outbox.RetryDelay(o.err); ok {
				delay = min(max(d, 0), e.opt.Backoff.Max)
			}
			retries = append(retries, dialect.RetryItem{ID: m.ID, Attempt: attempt, Delay: delay, Error: reason})
			retryBy[o.dest]++
			if firstRetry[o.dest] == "" {
				firstRetry[o.dest] = reason
			}
			log.Debug("delivery failed; will retry", append(attrs, "retry_in", delay, "err", reason)...)
		}
	}

	if len(sent) > 0 {
		e.write(log, "complete", token, len(sent), func(ctx context.Context) (int64, error) {
			return e.db.Complete(ctx, dialect.CompleteParams{Token: token, IDs: sent})
		})
	}
	if len(retries) > 0 {
		e.write(log, "retry", token, len(retries), func(ctx context.Context) (int64, error) {
			return e.db.Retry(ctx, dialect.RetryParams{Token: token, Items: retries})
		})
	}
	if len(deads) > 0 {
		e.write(log, "dead", token, len(deads), func(ctx context.Context) (int64, error) {
			return e.db.Dead(ctx, dialect.DeadParams{Token: token, Items: deads})
		})
	}
	if len(released) > 0 {
		e.write(log, "release", token, len(released), func(ctx context.Context) (int64, error) {
			return e.db.Release(ctx, dialect.ReleaseParams{Token: token, IDs: released})
		})
	}
	// The outcomes are reported once the caller knows they are durable:
	// at once in lease mode, after the batch transaction commits in lock
	// mode (a batch that does not commit goes back to pending: released).
	if deferred > 0 && deferred == len(outcomes) {
		pause = min(max(minDefer, e.opt.PollInterval), e.opt.MaxPollInterval)
	}
	return func(committed bool) {
		if !committed {
			e.obs.Settled("", OutcomeReleased, len(outcomes))
			return
		}
		e.report(log, sentBy, retryBy, deferredBy, deadBy, len(released), firstRetry)
	}, pause
}

// report sends the outcome counts of one settled batch to the observer
// and logs the failures once per destination.
func (e *Engine) report(log *slog.Logger, sentBy, retryBy, deferredBy, deadBy map[string]int, released int, firstRetry map[string]string) {
	for d, n := range sentBy {
		e.obs.Settled(d, OutcomeSent, n)
	}
	for d, n := range retryBy {
		e.obs.Settled(d, OutcomeRetry, n)
		log.Warn("deliveries failed; rows will be retried", "destination", d, "rows", n, "first_err", firstRetry[d])
	}
	for d, n := range deferredBy {
		e.obs.Settled(d, OutcomeDeferred, n)
		if retryBy[d] == 0 {
			log.Warn("destination unavailable; rows deferred without spending an attempt", "destination", d, "rows", n, "first_err", firstRetry[d])
		}
	}
	for d, n := range deadBy {
		e.obs.Settled(d, OutcomeDead, n)
	}
	if released > 0 {
		e.obs.Settled("", OutcomeReleased, released)
	}
}

// reason is the last_error text of a failed row: which destination, what
// happened, redacted and bounded.
func (e *Engine) reason(o *outcome) string {
	var s string
	switch {
	case errors.Is(o.err, outbox.ErrNoRoute):
		s = o.err.Error()
	case o.msg.Malformed != nil:
		s = "malformed row: " + o.err.Error()
	case o.dest != "":
		s = fmt.Sprintf("destination %s: %v", o.dest, o.err)
	default:
		s = o.err.Error()
	}
	return redact.Truncate(redact.OneLine(redact.String(s, e.opt.Secrets...)), maxErrorLen)
}

// write runs one fenced settlement statement. A database error is retried
// with backoff for up to one lease: after that the rows have gone back to
// pending anyway and another claim will deliver them again. Rows the
// statement did not change were no longer ours: they are counted as lost,
// not retried.
func (e *Engine) write(log *slog.Logger, op, token string, want int, fn func(context.Context) (int64, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), e.opt.Lease)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		start := time.Now()
		n, err := fn(ctx)
		e.obs.Wrote(op, time.Since(start), err)
		if err == nil {
			if lost := want - int(n); lost > 0 {
				e.obs.Lost(lost)
				log.Warn("claim lost before settling: rows were reclaimed after the lease expired; another relay delivers them (same ids)",
					"op", op, "token", token, "lost", lost, "of", want, "err", outbox.ErrLeaseLost)
			}
			return
		}
		if outbox.IsPermanent(err) || ctx.Err() != nil {
			log.Error("could not settle rows; they return to pending when the lease expires and are delivered again (same ids)",
				"op", op, "token", token, "rows", want, "err", err)
			return
		}
		log.Warn("settling rows failed; retrying", "op", op, "token", token, "rows", want, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}
