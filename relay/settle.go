package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
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

// settle writes the outcome of every row of outcomes, all of one claim
// (token): one statement per kind of outcome. A row whose publish was cut
// short (outcome.cut: shutdown, or a lease that could not be kept) is
// released rather than retried. It returns the function that reports the
// outcomes to the observer, to be called once they are durable: at once in
// lease mode, after the batch transaction commits in lock mode (a batch
// that does not commit goes back to pending: released).
func (e *Engine) settle(log *slog.Logger, c *claim, outcomes []outcome) (report func(committed bool)) {
	s := &settlement{e: e, log: log, c: c, outcomes: outcomes,
		sent: make([]string, 0, len(outcomes)), sentAt: make([]int, 0, len(outcomes)),
		sentBy: map[string]int{}, retryBy: map[string]int{}, deferredBy: map[string]int{},
		deadBy: map[string]int{}, firstRetry: map[string]string{}}
	for i := range outcomes {
		s.sort(i)
	}
	s.complete()
	s.retry()
	s.dead()
	s.deadLetterRefused()
	s.release()
	return func(committed bool) {
		if !committed {
			e.obs.Settled("", OutcomeReleased, len(outcomes))
			return
		}
		e.report(log, s.sentBy, s.retryBy, s.deferredBy, s.deadBy, s.releasedN, s.firstRetry)
	}
}

// settlement is the settling of one claim's outcomes: the rows of each
// kind, and where each is counted.
type settlement struct {
	e        *Engine
	log      *slog.Logger
	c        *claim
	outcomes []outcome

	sent []string
	// sentAt is the outcome of each of sent, and retryFrom and deadFrom
	// say where each of retries and deads is counted, index for index: for
	// a row the table refuses to settle (write).
	sentAt     []int
	sentBy     map[string]int
	retries    []dialect.RetryItem
	retryFrom  []counted
	retryBy    map[string]int
	deferredBy map[string]int // rows whose destination could not take them
	deads      []dialect.DeadItem
	deadFrom   []counted
	deadBy     map[string]int
	released   []string
	releasedN  int
	// One log line per destination and batch for retries: a broker that
	// is down must not print a line per row.
	firstRetry map[string]string
	// refused are rows the table would not mark sent or retry: they are
	// dead-lettered with the table's reason, where the table allows that.
	refused []refusedRow
}

type refusedRow struct {
	item dialect.DeadItem
	from counted
}

// sort files outcome i under its kind.
func (s *settlement) sort(i int) {
	e, o := s.e, &s.outcomes[i]
	m := o.msg
	if o.err == nil {
		s.sent = append(s.sent, m.ID)
		s.sentAt = append(s.sentAt, i)
		s.sentBy[o.dest]++
		return
	}
	permanent := outbox.IsPermanent(o.err) || errors.Is(o.err, outbox.ErrNoRoute)
	// A row deferred (its destination down, its circuit open) keeps its
	// deferral delay when the publish is cut: released, it would be due
	// again at once.
	if o.cut && !o.deferred && !permanent {
		s.released = append(s.released, m.ID)
		return
	}
	reason := e.reason(o)
	maxAttempts := m.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = e.opt.MaxAttempts
	}
	attempt := m.Attempt + 1
	attrs := []any{"id", m.ID, "topic", m.Topic, "key", m.Key, "destination", o.dest, "attempt", attempt} // as the row records it
	switch {
	case o.deferred && !permanent:
		// The destination is down, not the row: wait without spending an
		// attempt, so that no row dies because a broker was away.
		s.addRetry(o, dialect.RetryItem{ID: m.ID, Attempt: m.Attempt, Delay: e.retryDelay(o.err, e.opt.Backoff.Base), Error: reason}, s.deferredBy)
	case permanent:
		s.addDead(o, dialect.DeadItem{ID: m.ID, Attempt: attempt, Error: reason})
		s.log.Warn("row dead: permanent failure", append(attrs, "err", reason)...)
	case attempt >= maxAttempts:
		s.addDead(o, dialect.DeadItem{ID: m.ID, Attempt: attempt, Error: reason})
		s.log.Warn("row dead: attempts exhausted", append(attrs, "max_attempts", maxAttempts, "err", reason)...)
	default:
		delay := e.retryDelay(o.err, e.opt.Backoff.Delay(m.Attempt))
		s.addRetry(o, dialect.RetryItem{ID: m.ID, Attempt: attempt, Delay: delay, Error: reason}, s.retryBy)
		s.log.Debug("delivery failed; will retry", append(attrs, "retry_in", delay, "err", reason)...)
	}
}

// retryDelay is the receiver's requested delay, when err carries one
// (outbox.RetryAfter), capped by the backoff's maximum; else def.
func (e *Engine) retryDelay(err error, def time.Duration) time.Duration {
	if d, ok := outbox.RetryDelay(err); ok {
		return min(max(d, 0), e.opt.Backoff.Max)
	}
	return def
}

func (s *settlement) addRetry(o *outcome, it dialect.RetryItem, by map[string]int) {
	s.retries = append(s.retries, it)
	s.retryFrom = append(s.retryFrom, counted{by, o.dest})
	by[o.dest]++
	if s.firstRetry[o.dest] == "" {
		s.firstRetry[o.dest] = it.Error
	}
}

func (s *settlement) addDead(o *outcome, it dialect.DeadItem) {
	s.deads = append(s.deads, it)
	s.deadFrom = append(s.deadFrom, counted{s.deadBy, o.dest})
	s.deadBy[o.dest]++
}

// A statement the table refuses for some of its rows (a trigger or a
// constraint of an adopted table) is narrowed down to those rows, so that
// it does not hold back the rest of the batch (write).

func (s *settlement) complete() {
	if len(s.sent) == 0 {
		return
	}
	token := s.c.token
	refused, unsettled := s.e.write(s.log, "complete", token, &s.c.splits, len(s.sent), func(ctx context.Context, lo, hi int) (int64, error) {
		return s.e.db.Complete(ctx, dialect.CompleteParams{Token: token, IDs: s.sent[lo:hi]})
	})
	for _, r := range refused {
		o := &s.outcomes[s.sentAt[r.i]]
		s.refused = append(s.refused, refusedRow{
			dialect.DeadItem{ID: o.msg.ID, Attempt: o.msg.Attempt + 1, Error: s.e.refusal("delivered, but the table refused to mark the row sent", r.err)},
			counted{s.sentBy, o.dest}})
	}
	for _, i := range unsettled {
		s.sentBy[s.outcomes[s.sentAt[i]].dest]--
	}
}

func (s *settlement) retry() {
	if len(s.retries) == 0 {
		return
	}
	token := s.c.token
	refused, unsettled := s.e.write(s.log, "retry", token, &s.c.splits, len(s.retries), func(ctx context.Context, lo, hi int) (int64, error) {
		return s.e.db.Retry(ctx, dialect.RetryParams{Token: token, Items: s.retries[lo:hi]})
	})
	for _, r := range refused {
		it := s.retries[r.i]
		s.refused = append(s.refused, refusedRow{
			dialect.DeadItem{ID: it.ID, Attempt: it.Attempt, Error: s.e.refusal("the table refused the row's retry after: "+it.Error, r.err)},
			s.retryFrom[r.i]})
	}
	for _, i := range unsettled {
		s.retryFrom[i].by[s.retryFrom[i].dest]--
	}
}

func (s *settlement) dead() {
	if len(s.deads) == 0 {
		return
	}
	token := s.c.token
	refused, unsettled := s.e.write(s.log, "dead", token, &s.c.splits, len(s.deads), func(ctx context.Context, lo, hi int) (int64, error) {
		return s.e.db.Dead(ctx, dialect.DeadParams{Token: token, Items: s.deads[lo:hi]})
	})
	for _, r := range refused {
		s.deadFrom[r.i].by[s.deadFrom[r.i].dest]--
		logStuck(s.log, "the table refuses to dead-letter this row", token, s.deads[r.i].ID, r.err)
	}
	for _, i := range unsettled {
		s.deadFrom[i].by[s.deadFrom[i].dest]--
	}
}

// deadLetterRefused dead-letters the rows the table refused to mark sent or
// retry. A refused row is counted dead if it died, and otherwise not at
// all: it is not settled.
func (s *settlement) deadLetterRefused() {
	if len(s.refused) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.e.opt.Lease)
	defer cancel()
	for _, r := range s.refused {
		r.from.by[r.from.dest]--
		if s.e.deadLetter(ctx, s.log, s.c.token, r.from.dest, r.item) {
			s.deadBy[r.from.dest]++
		}
	}
}

func (s *settlement) release() {
	s.releasedN = len(s.released)
	if len(s.released) == 0 {
		return
	}
	token := s.c.token
	refused, unsettled := s.e.write(s.log, "release", token, &s.c.splits, len(s.released), func(ctx context.Context, lo, hi int) (int64, error) {
		return s.e.db.Release(ctx, dialect.ReleaseParams{Token: token, IDs: s.released[lo:hi]})
	})
	for _, r := range refused {
		s.releasedN--
		s.log.Error("the table refuses to release this row: it stays processing until its lease expires",
			"token", token, "id", s.released[r.i], "err", r.err)
	}
	s.releasedN -= len(unsettled)
}

// report sends the outcome counts of one settled batch to the observer
// and logs the failures once per destination.
func (e *Engine) report(log *slog.Logger, sentBy, retryBy, deferredBy, deadBy map[string]int, released int, firstRetry map[string]string) {
	// A count can be 0 when every row of it was refused (settle).
	for d, n := range sentBy {
		if n == 0 {
			continue
		}
		e.obs.Settled(d, OutcomeSent, n)
	}
	for d, n := range retryBy {
		if n == 0 {
			continue
		}
		e.obs.Settled(d, OutcomeRetry, n)
		log.Warn("deliveries failed; rows will be retried", "destination", d, "rows", n, "first_err", firstRetry[d])
	}
	for d, n := range deferredBy {
		if n == 0 {
			continue
		}
		e.obs.Settled(d, OutcomeDeferred, n)
		if retryBy[d] == 0 {
			log.Warn("rows deferred without spending an attempt: the destination is down, full, or holding its share of the rows in flight", "destination", d, "rows", n, "first_err", firstRetry[d])
		}
	}
	for d, n := range deadBy {
		if n == 0 {
			continue
		}
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
	case o.dest != "" && !strings.Contains(o.err.Error(), fmt.Sprintf("destination %q", o.dest)):
		// Named once: the destinations' own errors name them already
		// (http destination "hooks": ...), and dead list's table shows
		// the first 60 characters of the text.
		s = fmt.Sprintf("destination %s: %v", o.dest, o.err)
	default:
		s = o.err.Error()
	}
	return e.lastError(s)
}

// lastError is s as the last_error column gets it: secrets redacted, on
// one line, at most maxErrorLen bytes.
func (e *Engine) lastError(s string) string {
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
	return e.lastError(what + ": " + err.Error())
}

// logStuck logs a row the table refuses to dead-letter: nothing more can be
// written for it, so it stays processing.
func logStuck(log *slog.Logger, msg, token, id string, err error) {
	log.Error(msg+": it stays processing, and is delivered again (same id) when its lease expires; "+
		"fix the trigger or constraint named in the error, or delete the row",
		"token", token, "id", id, "err", err)
}

// maxSplitStatements bounds the statements write spends narrowing down the
// rows that the statements of one claim refuse, beside the statements
// themselves: one refused row of a batch of 1,000 takes 20 more, and a
// statement refused for every row (a missing permission) must not cost
// thousands.
const maxSplitStatements = 64

// rowError is a row that a settlement statement refused on its own, with
// the database's error.
type rowError struct {
	i   int
	err error
}

// write runs one fenced settlement statement over rows [0, n), through fn
// on a range of them (writeRange: retries, lost claims).
//
// A permanent error (the table refused the statement: a trigger, a
// constraint) is narrowed down by halving the range, in lease mode, so that
// one row the table refuses does not send the whole batch back to pending
// at every lease expiry, to be delivered and refused again. It returns the
// rows the table refused on their own, each with its error, and the rows
// that could not be settled otherwise: those are logged here, come back
// when their lease expires, and are to be counted in no outcome. In lock mode a failed statement has rolled back the
// batch's transaction: nothing can be narrowed, and the batch is delivered
// again.
func (e *Engine) write(log *slog.Logger, op, token string, budget *int, n int, fn func(ctx context.Context, lo, hi int) (int64, error)) (refused []rowError, unsettled []int) {
	ctx, cancel := context.WithTimeout(context.Background(), e.opt.Lease)
	defer cancel()
	_, lockMode := e.db.(dialect.BatchCommitter)
	var run func(lo, hi int)
	run = func(lo, hi int) {
		_, err := e.writeRange(ctx, log, op, token, hi-lo, func(ctx context.Context) (int64, error) { return fn(ctx, lo, hi) })
		switch {
		case err == nil:
		case outbox.IsPermanent(err) && !lockMode && hi-lo == 1:
			refused = append(refused, rowError{lo, err})
		case !outbox.IsPermanent(err) || ctx.Err() != nil || lockMode || *budget < 2:
			log.Error("could not settle rows; they return to pending when the lease expires and are delivered again (same ids)",
				"op", op, "token", token, "rows", hi-lo, "err", err)
			for i := lo; i < hi; i++ {
				unsettled = append(unsettled, i)
			}
		default:
			if lo == 0 && hi == n {
				log.Warn("the table refused a settlement statement; narrowing it down to the rows it refuses",
					"op", op, "token", token, "rows", n, "err", err)
			}
			*budget -= 2
			mid := lo + (hi-lo)/2
			run(lo, mid)
			run(mid, hi)
		}
	}
	run(0, n)
	return refused, unsettled
}

// deadLetter dead-letters one row that the table refused to mark sent or
// retry, in a statement of its own, and reports whether the row is dead.
// The dead-letters of one settlement share ctx, and so one lease.
func (e *Engine) deadLetter(ctx context.Context, log *slog.Logger, token, dest string, item dialect.DeadItem) bool {
	n, err := e.writeRange(ctx, log, "dead", token, 1, func(ctx context.Context) (int64, error) {
		return e.db.Dead(ctx, dialect.DeadParams{Token: token, Items: []dialect.DeadItem{item}})
	})
	switch {
	case err == nil && n == 1:
		log.Warn("row dead: the table refused its settlement", "id", item.ID, "destination", dest, "token", token, "err", item.Error)
		return true
	case outbox.IsPermanent(err):
		logStuck(log, "the table refuses every settlement of this row", token, item.ID, err)
	case err != nil:
		log.Error("could not dead-letter a row the table refused to settle; it returns to pending when the lease expires and is delivered again (same id)",
			"token", token, "id", item.ID, "err", err)
	}
	return false
}

// writeRange runs fn, retrying a failure that a later attempt can get past
// until ctx ends, and counts the rows it did not change as lost claims. It
// returns the rows changed, or the last error when fn did not succeed.
//
// After an attempt that failed with outbox.MaybeApplied (the connection
// broke after the statement was sent), the rows a later attempt does not
// change may have been changed by that attempt: they are logged, not
// counted as lost claims, which alert.
func (e *Engine) writeRange(ctx context.Context, log *slog.Logger, op, token string, want int, fn func(context.Context) (int64, error)) (int64, error) {
	wait := 50 * time.Millisecond
	maybeApplied := false
	for {
		start := time.Now()
		n, err := fn(ctx)
		e.obs.Wrote(op, time.Since(start), err)
		if err == nil {
			switch lost := want - int(n); {
			case lost <= 0:
			case maybeApplied:
				log.Warn("a retried settlement changed fewer rows than it asked for: the attempt before it, whose answer was lost, may have committed them, or they were reclaimed after the lease expired and another relay delivers them (same ids)",
					"op", op, "token", token, "unchanged", lost, "of", want)
			default:
				e.obs.Lost(lost)
				log.Warn("claim lost before settling: rows were reclaimed after the lease expired; another relay delivers them (same ids)",
					"op", op, "token", token, "lost", lost, "of", want, "err", outbox.ErrLeaseLost)
			}
			return n, nil
		}
		if outbox.IsPermanent(err) || ctx.Err() != nil {
			return 0, err
		}
		maybeApplied = maybeApplied || outbox.IsMaybeApplied(err)
		log.Warn("settling rows failed; retrying", "op", op, "token", token, "rows", want, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}
