package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
)

// lane carries the rows of one destination: a queue of claimed rows, and
// publishes of parts of it while the rows in flight stay under the
// destination's limit (limiter). Each row leaves the lane, and goes to the
// settler, as soon as its own outcome is known (destination.Streamer), so
// that a slow row holds only itself. A lane holds at most share rows,
// queued and in flight, unless it answers them quickly (quick): the rows
// that a slow destination would hold beyond that wait in the table instead
// (deferred), and keep no budget from the other destinations.
type lane struct {
	e       *Engine
	name    string
	dest    destination.Destination
	stream  destination.Streamer // nil: outcomes come per Publish call
	breaker *breaker
	limit   *limiter
	share   int

	mu       sync.Mutex
	queue    []part
	queued   int       // rows in queue
	inflight int       // rows published and not yet answered
	answered time.Time // the last answer
	kick     chan struct{}
}

// part is rows of one claim bound for one destination, published
// together.
type part struct {
	claim *claim
	msgs  []*outbox.Message
}

func newLane(e *Engine, name string, d destination.Destination, cap, share int) *lane {
	l := &lane{e: e, name: name, dest: d, breaker: newBreaker(e.opt.Breaker),
		limit: newLimiter(min(max(e.opt.BatchSize, 16), cap), cap), share: max(share, 1),
		kick: make(chan struct{}, 1)}
	l.stream, _ = d.(destination.Streamer)
	e.obs.DestinationLimit(name, l.limit.current())
	return l
}

// offer queues rows of claim c for the destination. It returns 0 when it
// took them; otherwise the destination's circuit is open or the lane is
// full, the rows are deferred, and the return is when the destination may
// take rows again.
func (l *lane) offer(c *claim, msgs []*outbox.Message) time.Duration {
	if ok, wait := l.breaker.allowsQueue(); !ok {
		l.deferRows(c, msgs, l.breaker.reason(), wait)
		return wait
	}
	l.mu.Lock()
	room := l.share - l.queued - l.inflight
	if room < len(msgs) && l.quick(len(msgs)) {
		room = len(msgs)
	}
	take := msgs
	var over []*outbox.Message
	if room < len(msgs) {
		take, over = msgs[:max(room, 0)], msgs[max(room, 0):]
	}
	if len(take) > 0 {
		l.queue = append(l.queue, part{claim: c, msgs: take})
		l.queued += len(take)
	}
	wait := l.drainTime()
	l.mu.Unlock()
	if len(over) > 0 {
		// The destination holds its share of the budget already: these
		// rows wait in the table for about as long as its queue takes.
		l.deferRows(c, over, errLaneFull, wait)
	}
	l.wake()
	if len(take) == 0 {
		return wait
	}
	return 0
}

// errLaneFull is the outcome of a row deferred because its destination
// holds its whole share of the in-flight budget.
var errLaneFull = errors.New("not published: the destination holds its share of the rows in flight (a slow destination); the row waits without spending an attempt")

// quick reports whether the lane answers the rows it holds, and n more,
// sooner than a deferred row would come back from the table (the backoff's
// base): a fast destination over its share is only a little ahead of its
// publishes, and holding the rows costs the other destinations less than
// deferring them costs these rows' keys. A lane whose rows in flight have
// had no answer for a while is not quick, whatever its last latency said.
// The claimer claims only within the budget, so a quick lane over its
// share still holds no more than the budget. The caller holds l.mu.
func (l *lane) quick(n int) bool {
	rtt := l.limit.latency()
	if rtt <= 0 || (l.inflight > 0 && time.Since(l.answered) > 2*rtt+l.e.opt.PollInterval) {
		return false
	}
	d := time.Duration(float64(rtt) * float64(l.queued+l.inflight+n) / float64(max(l.limit.current(), 1)))
	return d < l.e.opt.Backoff.Base
}

// drainTime estimates how long the lane takes to answer the rows it holds:
// the caller holds l.mu.
func (l *lane) drainTime() time.Duration {
	rtt := l.limit.latency()
	if rtt <= 0 {
		rtt = l.e.opt.Backoff.Base
	}
	n := l.queued + l.inflight
	d := time.Duration(float64(rtt) * float64(n) / float64(max(l.limit.current(), 1)))
	return min(max(d, l.e.opt.Backoff.Base), l.e.opt.Backoff.Max)
}

// deferRows settles rows without publishing them: they wait delay, or the
// error's own delay, without spending an attempt.
func (l *lane) deferRows(c *claim, msgs []*outbox.Message, err error, delay time.Duration) {
	if _, ok := outbox.RetryDelay(err); !ok {
		err = outbox.RetryAfter(err, delay)
	}
	for _, m := range msgs {
		l.e.settler.add(outcome{claim: c, msg: m, dest: l.name, err: err, deferred: true})
	}
}

func (l *lane) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run publishes the lane's queue until ctx ends; then it releases what is
// left in the queue (without spending attempts) and returns once the
// publishes still out have answered.
func (l *lane) run(ctx context.Context) {
	var pubs sync.WaitGroup
	defer pubs.Wait()
	for {
		select {
		case <-ctx.Done():
			l.releaseQueue()
			return
		case <-l.kick:
		}
		for ctx.Err() == nil {
			p, ok := l.next()
			if !ok {
				break
			}
			if p.claim.lost.Load() {
				l.done(len(p.msgs))
				for _, m := range p.msgs {
					l.e.settler.add(outcome{claim: p.claim, msg: m, dest: l.name, err: errLeaseLost, cut: true})
				}
				continue
			}
			before := l.breaker.current()
			allowed, wait := l.breaker.allow()
			if after := l.breaker.current(); after == BreakerClosed && before == BreakerOpen {
				l.e.obs.BreakerChanged(l.name, after)
				l.e.log.Info("destination resumed after its pause for room", "destination", l.name)
			}
			if !allowed {
				// Down or full: what waits here goes back to the table.
				l.done(len(p.msgs))
				l.deferRows(p.claim, p.msgs, l.breaker.reason(), wait)
				l.deferQueue(wait)
				continue
			}
			pubs.Add(1)
			go func() {
				defer pubs.Done()
				l.publish(ctx, p)
			}()
		}
	}
}

var errLeaseLost = errors.New("not published: the claim's lease was lost; another relay delivers the row (same id)")

// next takes the next part to publish, within the destination's limit.
// While the limit is reached it waits for room for a quarter of the limit
// (or the whole part, when smaller): one answer at a time, parts of a row
// or two cost a publish each.
func (l *lane) next() (part, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := l.limit.current()
	room := limit - l.inflight
	if len(l.queue) == 0 || room <= 0 {
		return part{}, false
	}
	p := l.queue[0]
	if room < min(len(p.msgs), max(limit/4, 1)) && l.inflight > 0 {
		return part{}, false
	}
	n := min(room, len(p.msgs), l.e.opt.BatchSize)
	if n < len(p.msgs) {
		l.queue[0].msgs = p.msgs[n:]
		p.msgs = p.msgs[:n]
	} else {
		l.queue[0] = part{}
		l.queue = l.queue[1:]
	}
	l.queued -= n
	l.inflight += n
	return p, true
}

// done records n rows that left the lane without an answer.
func (l *lane) done(n int) {
	l.mu.Lock()
	l.inflight -= n
	l.mu.Unlock()
}

// deferQueue defers every row still queued.
func (l *lane) deferQueue(wait time.Duration) {
	l.mu.Lock()
	q := l.queue
	l.queue, l.queued = nil, 0
	l.mu.Unlock()
	for _, p := range q {
		l.deferRows(p.claim, p.msgs, l.breaker.reason(), wait)
	}
}

// releaseQueue settles every row still queued as released: shutdown.
func (l *lane) releaseQueue() {
	l.mu.Lock()
	q := l.queue
	l.queue, l.queued = nil, 0
	l.mu.Unlock()
	for _, p := range q {
		for _, m := range p.msgs {
			l.e.settler.add(outcome{claim: p.claim, msg: m, dest: l.name, err: errShutdown, cut: true})
		}
	}
}

var errShutdown = errors.New("not published: the relay is shutting down")

// publish sends one part and settles each row as its answer comes.
func (l *lane) publish(parent context.Context, p part) {
	ctx := p.claim.publishContext(parent)
	msgs := make([]outbox.Message, len(p.msgs))
	var ends []func(error) // per row, when a Tracer follows the publish
	if l.e.opt.Tracer != nil {
		ends = make([]func(error), len(p.msgs))
	}
	for i, m := range p.msgs {
		msgs[i] = *m
		if ends != nil {
			ends[i] = l.e.opt.Tracer.Start(ctx, l.name, &msgs[i])
		}
	}
	start := time.Now()
	var (
		mu          sync.Mutex
		unavailable int
	)
	answer := func(i int, err error) {
		if ends != nil {
			ends[i](err)
		}
		now := time.Now()
		if err == nil {
			if created := p.msgs[i].CreatedAt; !created.IsZero() {
				l.e.obs.Acked(l.name, now.Sub(created))
			}
		}
		o := l.classify(ctx, p, i, err, start)
		if o.deferred && outbox.IsUnavailable(err) {
			mu.Lock()
			unavailable++
			mu.Unlock()
		}
		l.mu.Lock()
		used := l.inflight
		l.inflight--
		l.answered = now
		limit := l.limit.current()
		waiting := l.queued > 0 && (l.inflight == 0 || limit-l.inflight >= max(limit/4, 1))
		l.mu.Unlock()
		if changed, limit := l.limit.record(now.Sub(start), used, congestion(err)); changed {
			l.e.obs.DestinationLimit(l.name, limit)
			l.e.log.Debug("destination limit changed", "destination", l.name, "limit", limit, "latency", l.limit.latency())
		}
		l.e.settler.add(o)
		if waiting {
			l.wake() // room for rows that wait
		}
	}
	var err error
	if l.stream != nil {
		l.stream.PublishEach(ctx, msgs, answer)
	} else {
		// Every answer of the part comes at once: the rows the destination
		// took say it is up before any failure of the others is judged.
		err = l.dest.Publish(ctx, msgs)
		errs := make([]error, len(msgs))
		for i := range msgs {
			if errs[i] = destination.ErrorAt(err, i); answered(errs[i]) {
				l.breaker.answered()
			}
		}
		for i := range msgs {
			answer(i, errs[i])
		}
	}
	l.e.obs.Published(l.name, len(msgs), time.Since(start), err)
	if ctx.Err() != nil {
		// Cut short (shutdown, or the claim's lease was lost): says
		// nothing of the destination.
		l.breaker.abandon()
		return
	}
	l.recordBreaker(unavailable == len(msgs) && l.breaker.noAnswerSince(start))
}

// classify turns a row's answer into its outcome. A row that failed
// because the destination is down (outbox.Unavailable) waits without
// spending an attempt, unless the destination answered another row while
// it was out (took it, or refused it for a reason of its own): then the
// destination is up, and the failure is the row's. A row
// the destination has no room for (outbox.NoRoom) waits, and the
// destination pauses.
func (l *lane) classify(ctx context.Context, p part, i int, err error, start time.Time) outcome {
	o := outcome{claim: p.claim, msg: p.msgs[i], dest: l.name, err: err}
	if answered(err) {
		l.breaker.answered()
	}
	switch {
	case err == nil:
	case ctx.Err() != nil && !outbox.IsPermanent(err):
		// Cut short: the lease was lost, or the shutdown deadline passed.
		o.cut = true
	case outbox.IsNoRoom(err):
		limit, _ := outbox.NoRoomLimit(err)
		wait, paused := l.breaker.fullAnswer(err)
		l.e.obs.Backpressure(l.name, limit)
		if paused {
			l.e.obs.BreakerChanged(l.name, BreakerOpen)
			l.e.log.Warn("destination full: it is paused and its rows wait without spending attempts",
				"destination", l.name, "limit", limit, "resume_in", wait, "err", err)
		}
		o.deferred = true
		if _, ok := outbox.RetryDelay(err); !ok {
			o.err = outbox.RetryAfter(err, wait)
		}
	case outbox.IsUnavailable(err) && l.breaker.noAnswerSince(start):
		o.deferred = true
	}
	return o
}

// answered reports whether err (nil: accepted) says the destination is up:
// it took the row, or refused it for a reason of the row's own.
func answered(err error) bool {
	return err == nil || (!outbox.IsUnavailable(err) && !outbox.IsNoRoom(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded))
}

// congestion reports whether err says the destination struggles: the
// limiter backs off.
func congestion(err error) bool {
	return err != nil && (outbox.IsNoRoom(err) || outbox.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded))
}

// recordBreaker notes the outcome of a publish for the circuit breaker.
func (l *lane) recordBreaker(down bool) {
	from, to := l.breaker.record(down)
	if from == to {
		return
	}
	l.e.obs.BreakerChanged(l.name, to)
	switch to {
	case BreakerOpen:
		l.e.log.Warn("circuit opened: the destination keeps failing at the connection level; its rows wait without spending attempts",
			"destination", l.name)
	default:
		l.e.log.Info("circuit "+to.String(), "destination", l.name)
	}
}
