package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
)

// Message is one inbox row as a Worker's handler sees it.
type Message struct {
	ID             string // the message id: the 202 answer's, the one a push source's outbox row carries
	Source         string
	IdempotencyKey string
	Topic          string
	Key            string // order key; "" for none
	Payload        []byte
	Headers        map[string]string
	Attempt        int // 0 on the first delivery
	MaxAttempts    int
	Sequence       int64
	ReceivedAt     time.Time
}

// Handler applies one message inside tx. The Worker marks the row
// processed in the same tx and commits it when Handler returns nil; any
// error rolls the whole transaction back and retries the row with backoff
// (outbox.Permanent(err): dead at once).
type Handler func(ctx context.Context, tx pgx.Tx, m Message) error

// WorkerOptions configure a Worker. Source is required.
type WorkerOptions struct {
	Source  string
	Table   string            // default MessagesTable
	Columns map[string]string // as for NewMapping
	// Concurrency is how many messages are handled at once (default 1).
	// Rows of one key are never handled at once, whatever it is.
	Concurrency  int
	Lease        time.Duration // default 30s; renewed every Lease/3 while a handler runs
	PollInterval time.Duration // default 250ms: the wait after a claim that found nothing
	Backoff      relay.Backoff // retry schedule (defaults as relay.backoff)
	// MaxAttempts applies to rows whose max_attempts is not positive.
	MaxAttempts int
	Logger      *slog.Logger
	// Observer receives the same events as the relay's (relay.Observer),
	// with the destination named "inbox:<source>"; nil: none.
	Observer relay.Observer
}

// Worker claims the pending rows of one pull source, in per-key order, and
// hands each to a Handler inside a transaction that also marks it
// processed. Run it in as many processes as you like.
type Worker struct {
	pool    *pgxpool.Pool
	h       Handler
	o       WorkerOptions
	sql     map[string]string // sql/postgresql: claim, complete and the fenced writes
	destTag string
}

// workerQueries are the Worker's statements: the outbox dialect's claim,
// renew, retry, dead, release and reaper, for the rows of one source.
var workerQueries = []string{"claim", "complete", "renew", "retry", "dead", "release", "release_expired"}

// NewWorker returns a Worker of o.Source on pool.
func NewWorker(pool *pgxpool.Pool, h Handler, o WorkerOptions) (*Worker, error) {
	if pool == nil || h == nil {
		return nil, errors.New("inbox: NewWorker needs a pool and a handler")
	}
	if o.Source == "" {
		return nil, errors.New("inbox: WorkerOptions.Source is required")
	}
	m, err := NewMapping(o.Table, o.Columns)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	q, err := renderSQL(m, dialect.DefaultMapping(), workerQueries...)
	if err != nil {
		return nil, err
	}
	o.Concurrency = max(o.Concurrency, 1)
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.Backoff.Base <= 0 {
		o.Backoff.Base = time.Second
	}
	if o.Backoff.Max < o.Backoff.Base {
		o.Backoff.Max = max(time.Minute, o.Backoff.Base)
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = relay.NopObserver{}
	}
	return &Worker{pool: pool, h: h, o: o, sql: q, destTag: "inbox:" + o.Source}, nil
}

// Run claims and handles messages until ctx ends, then waits for the
// handlers in flight (they keep their context until they return) and
// returns nil. Rows of a worker that dies are claimed again when their
// lease expires.
func (w *Worker) Run(ctx context.Context) error {
	slots := make(chan struct{}, w.o.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	go w.reap(ctx)
	for ctx.Err() == nil {
		free := cap(slots) - len(slots)
		if free == 0 {
			select {
			case slots <- struct{}{}: // wait for one slot, then give it back
				<-slots
			case <-ctx.Done():
			}
			continue
		}
		msgs, b, err := w.claimBatch(ctx, free)
		if err != nil && ctx.Err() == nil {
			w.o.Logger.Warn("inbox worker: claim failed", "source", w.o.Source, "err", err)
		}
		if len(msgs) == 0 {
			sleep(ctx, w.o.PollInterval)
			continue
		}
		for _, m := range msgs {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				w.handle(context.WithoutCancel(ctx), b, m)
			}()
		}
	}
	return nil
}

// batch is one claim: its token, and its rows still being handled, for
// which a goroutine renews the lease.
type batch struct {
	token string
	mu    sync.Mutex
	open  int
	stop  chan struct{}
}

func (b *batch) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open--; b.open == 0 {
		close(b.stop)
	}
}

func (w *Worker) claimBatch(ctx context.Context, limit int) ([]Message, *batch, error) {
	token := uuid.NewString()
	start := time.Now()
	rows, err := w.pool.Query(ctx, w.sql["claim"], token, w.o.Lease.Microseconds(), w.o.Source, limit)
	var msgs []Message
	if err == nil {
		msgs, err = scanMessages(rows, w.o.Source)
	}
	w.o.Observer.Claimed(len(msgs), limit, time.Since(start), err)
	if err != nil || len(msgs) == 0 {
		return nil, nil, err
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].Sequence < msgs[j].Sequence })
	b := &batch{token: token, open: len(msgs), stop: make(chan struct{})}
	go w.renew(context.WithoutCancel(ctx), b)
	return msgs, b, nil
}

func scanMessages(rows pgx.Rows, source string) ([]Message, error) {
	defer rows.Close()
	var out []Message
	for rows.Next() {
		m := Message{Source: source}
		var key *string
		var payload, headers string
		if err := rows.Scan(&m.ID, &m.IdempotencyKey, &m.Topic, &key, &payload, &headers, &m.Attempt, &m.MaxAttempts, &m.Sequence, &m.ReceivedAt); err != nil {
			return nil, err
		}
		if key != nil {
			m.Key = *key
		}
		m.Payload = []byte(payload)
		m.Headers, _ = dialect.DecodeHeaders([]byte(headers)) // written by Receive: a JSON object of strings
		out = append(out, m)
	}
	return out, rows.Err()
}

// renew extends the batch's lease every Lease/3 until its last handler
// returns.
func (w *Worker) renew(ctx context.Context, b *batch) {
	t := time.NewTicker(w.o.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, w.o.Lease/3)
			_, err := w.pool.Exec(rctx, w.sql["renew"], b.token, w.o.Lease.Microseconds())
			cancel()
			if err != nil {
				w.o.Logger.Warn("inbox worker: lease renewal failed", "source", w.o.Source, "err", err)
			}
		}
	}
}

// handle runs the handler for m in a transaction that marks m processed,
// and settles a failure with a fenced retry or dead write.
func (w *Worker) handle(ctx context.Context, b *batch, m Message) {
	defer b.finish()
	err := w.apply(ctx, b.token, m)
	switch {
	case err == nil:
		w.o.Observer.Settled(w.destTag, relay.OutcomeSent, 1)
	case errors.Is(err, outbox.ErrLeaseLost):
		w.o.Observer.Lost(1)
		w.o.Logger.Warn("inbox worker: claim lost before commit; the handler's transaction was rolled back", "source", w.o.Source, "id", m.ID)
	default:
		w.fail(ctx, b.token, m, err)
	}
}

func (w *Worker) apply(ctx context.Context, token string, m Message) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return outbox.Unavailable(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := w.h(ctx, tx, m); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, w.sql["complete"], m.ID, token)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return outbox.ErrLeaseLost
	}
	return tx.Commit(ctx)
}

// fail retries m with backoff, or dead-letters it when the error is
// permanent or its attempts are spent. An error marked
// outbox.Unavailable (the database could not be reached) releases the row
// without spending an attempt.
func (w *Worker) fail(ctx context.Context, token string, m Message, cause error) {
	limit := m.MaxAttempts
	if limit <= 0 {
		limit = w.o.MaxAttempts
	}
	reason := cause.Error()
	if len(reason) > 1024 {
		reason = strings.ToValidUTF8(reason[:1024], "")
	}
	attempt := m.Attempt + 1
	start := time.Now()
	op, outcome, args := "retry", relay.OutcomeRetry, []any{m.ID, token, attempt, 0, reason}
	switch {
	case outbox.IsUnavailable(cause):
		op, outcome, args = "release", relay.OutcomeReleased, []any{m.ID, token}
	case outbox.IsPermanent(cause) || attempt >= limit:
		op, outcome, args = "dead", relay.OutcomeDead, []any{m.ID, token, attempt, reason}
	default:
		delay := w.o.Backoff.Delay(m.Attempt)
		if d, ok := outbox.RetryDelay(cause); ok {
			delay = min(max(d, 0), w.o.Backoff.Max)
		}
		args[3] = delay.Microseconds()
	}
	tag, err := w.pool.Exec(ctx, w.sql[op], args...)
	n := tag.RowsAffected()
	w.o.Observer.Wrote(op, time.Since(start), err)
	switch {
	case err != nil:
		w.o.Logger.Warn("inbox worker: could not record the failure; the row comes back when its lease expires", "source", w.o.Source, "id", m.ID, "err", err)
	case n == 0:
		w.o.Observer.Lost(1)
	default:
		w.o.Observer.Settled(w.destTag, outcome, 1)
		w.o.Logger.Info("inbox worker: handler failed", "source", w.o.Source, "id", m.ID, "attempt", attempt, "outcome", op, "err", reason)
	}
}

// reap returns rows whose lease expired (a worker that died) to pending.
func (w *Worker) reap(ctx context.Context) {
	t := time.NewTicker(max(w.o.Lease/2, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tag, err := w.pool.Exec(ctx, w.sql["release_expired"], 1000)
			n := tag.RowsAffected()
			if err == nil && n > 0 {
				w.o.Observer.Reclaimed(int(n))
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
