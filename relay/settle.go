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
		sent []string
		// sentMsg and sentDest are sent's messages and destinations, and
		// retryFrom says where each of retries is counted, index for
		// index: for a row the table refuses to settle (write).
		sentMsg   []*outbox.Message
		sentDest  []string
		sentBy    = map[string]int{}
		retries   []dialect.RetryItem
		retryFrom []counted
		retryBy   = map[string]int{}
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
			sentMsg = append(sentMsg, m)
			sentDest = append(sentDest, o.dest)
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
			retryFrom = append(retryFrom, counted{deferredBy, o.dest})
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
			retryFrom = append(retryFrom, counted{retryBy, o.dest})
			retryBy[o.dest]++
			if firstRetry[o.dest] == "" {
				firstRetry[o.dest] = reason
			}
			log.Debug("delivery failed; will retry", append(attrs, "retry_in", delay, "err", reason)...)
		}
	}

	// A statement the table refuses for some of its rows (a trigger or a
	// constraint of an adopted table) is narrowed down to those rows, so
	// that it does not hold back the rest of the batch; the rows it refuses
	// are dead-lettered with the reason where the table allows that.
	var (
		refusedDeads []dialect.DeadItem
		refusedFrom  []counted
	)
	if len(sent) > 0 {
		refused, why := e.write(log, "complete", token, len(sent), func(ctx context.Context, lo, hi int) (int64, error) {
			return e.db.Complete(ctx, dialect.CompleteParams{Token: token, IDs: sent[lo:hi]})
		})
		for _, i := range refused {
			m := sentMsg[i]
			refusedDeads = append(refusedDeads, dialect.DeadItem{ID: m.ID, Attempt: m.Attempt + 1,
				Error: e.refusal("delivered, but the table refused to mark the row sent", why)})
			refusedFrom = append(refusedFrom, counted{sentBy, sentDest[i]})
		}
	}
	if len(retries) > 0 {
		refused, why := e.write(log, "retry", token, len(retries), func(ctx context.Context, lo, hi int) (int64, error) {
			return e.db.Retry(ctx, dialect.RetryParams{Token: token, Items: retries[lo:hi]})
		})
		for _, i := range refused {
			it := retries[i]
			refusedDeads = append(refusedDeads, dialect.DeadItem{ID: it.ID, Attempt: it.Attempt,
				Error: e.refusal("the table refused the row's retry after: "+it.Error, why)})
			refusedFrom = append(refusedFrom, retryFrom[i])
		}
	}
	first := len(deads)
	deads = append(deads, refusedDeads...)
	if len(deads) > 0 {
		refused, why := e.write(log, "dead", token, len(deads), func(ctx context.Context, lo, hi int) (int64, error) {
			return e.db.Dead(ctx, dialect.DeadParams{Token: token, Items: deads[lo:hi]})
		})
		stuck := map[int]bool{}
		for _, i := range refused {
			stuck[i] = true
			log.Error("the table refuses every settlement of this row: it stays processing, and is delivered again (same id) when its lease expires; "+
				"fix the trigger or constraint named in the error, or delete the row",
				"op", "dead", "token", token, "id", deads[i].ID, "err", why)
		}
		// A row the table would not mark sent or retry, but let die, is
		// counted dead.
		for j, from := range refusedFrom {
			if !stuck[first+j] {
				log.Warn("row dead: the table refused its settlement", "id", deads[first+j].ID, "destination", from.dest, "err", deads[first+j].Error)
				from.by[from.dest]--
				deadBy[from.dest]++
			}
		}
	}
	if len(released) > 0 {
		e.write(log, "release", token, len(released), func(ctx context.Context, lo, hi int) (int64, error) {
			return e.db.Release(ctx, dialect.ReleaseParams{Token: token, IDs: released[lo:hi]})
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

// counted names the counter, and its destination, that an outcome was
// counted in.
type counted struct {
	by   map[string]int
	dest string
}

// refusal is the last_error text of a row whose settlement the table
// refused.
func (e *Engine) refusal(what string, err error) string {
	return redact.Truncate(redact.OneLine(redact.String(what+": "+err.Error(), e.opt.Secrets...)), maxErrorLen)
}

// maxSplitStatements bounds the statements write spends narrowing down the
// rows a statement refuses: one refused row of a batch of 1,000 takes 20,
// and a statement refused for every row (a missing permission) must not
// cost thousands.
const maxSplitStatements = 64

// write runs one fenced settlement statement over rows [0, n), through fn
// on a range of them. A database error is retried with backoff for up to
// one lease: after that the rows have gone back to pending anyway and
// another claim will deliver them again. Rows the statement did not change
// were no longer ours: they are counted as lost, not retried.
//
// A permanent error (the table refused the statement: a trigger, a
// constraint) is narrowed down by halving the range, in lease mode, so that
// one row the table refuses does not send the whole batch back to pending
// at every lease expiry, to be delivered and refused again. refused lists
// the rows the table refused on their own, and why is the first such
// error. In lock mode a failed statement has rolled back the batch's
// transaction: nothing can be narrowed, and the batch is delivered again.
func (e *Engine) write(log *slog.Logger, op, token string, n int, fn func(ctx context.Context, lo, hi int) (int64, error)) (refused []int, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.opt.Lease)
	defer cancel()
	_, lockMode := e.db.(dialect.BatchCommitter)
	budget := maxSplitStatements
	var run func(lo, hi int)
	run = func(lo, hi int) {
		err := e.writeRange(ctx, log, op, token, hi-lo, func(ctx context.Context) (int64, error) { return fn(ctx, lo, hi) })
		switch {
		case err == nil:
		case !outbox.IsPermanent(err) || ctx.Err() != nil || lockMode || budget <= 0:
			log.Error("could not settle rows; they return to pending when the lease expires and are delivered again (same ids)",
				"op", op, "token", token, "rows", hi-lo, "err", err)
		case hi-lo == 1:
			refused = append(refused, lo)
			if why == nil {
				why = err
			}
		default:
			if lo == 0 && hi == n {
				log.Warn("the table refused a settlement statement; narrowing it down to the rows it refuses",
					"op", op, "token", token, "rows", n, "err", err)
			}
			budget -= 2
			mid := lo + (hi-lo)/2
			run(lo, mid)
			run(mid, hi)
		}
	}
	run(0, n)
	return refused, why
}

// writeRange runs fn, retrying a failure that a later attempt can get past
// until ctx ends, and counts the rows it did not change as lost (unless an
// attempt failed before: then they may be its own). It
// returns the last error when fn did not succeed.
func (e *Engine) writeRange(ctx context.Context, log *slog.Logger, op, token string, want int, fn func(context.Context) (int64, error)) error {
	wait := 50 * time.Millisecond
	failed := false // an attempt failed before this one
	for {
		start := time.Now()
		n, err := fn(ctx)
		e.obs.Wrote(op, time.Since(start), err)
		if err == nil {
			switch lost := want - int(n); {
			case lost <= 0:
			case failed:
				// An attempt that failed may have committed before its
				// reply was lost: the rows this one did not change may be
				// settled already, by that attempt, or reclaimed. They are
				// not counted as lost claims, which alert.
				log.Warn("a retried settlement changed fewer rows than it asked for: the failed attempt before it committed them, or they were reclaimed after the lease expired and another relay delivers them (same ids)",
					"op", op, "token", token, "unchanged", lost, "of", want)
			default:
				e.obs.Lost(lost)
				log.Warn("claim lost before settling: rows were reclaimed after the lease expired; another relay delivers them (same ids)",
					"op", op, "token", token, "lost", lost, "of", want, "err", outbox.ErrLeaseLost)
			}
			return nil
		}
		failed = true
		if outbox.IsPermanent(err) || ctx.Err() != nil {
			return err
		}
		log.Warn("settling rows failed; retrying", "op", op, "token", token, "rows", want, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}
