package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// fakeDialect is the engine's view of a table, for tests of the engine's
// logic rather than of a database (dialecttest covers those). It hands out
// batches (one per claim, then nothing) or what claimFn returns, counts the
// rows each token holds, and records every settlement. Renew reports the
// rows the token still holds, unless renewFn says otherwise. Safe for the
// engine's goroutines.
type fakeDialect struct {
	claimFn func(p dialect.ClaimParams) ([]outbox.Message, error) // nil: batches
	renewFn func() (int64, error)                                 // nil: the rows the token holds
	// claimDelay and renewDelay are how long each claim and each renewal
	// take (a claim queued for the claim turn, a slow link), unless their
	// context ends first.
	claimDelay, renewDelay time.Duration
	commitErr              error // lockMode's Commit answer

	mu        sync.Mutex
	batches   [][]outbox.Message
	claims    []dialect.ClaimParams
	claimedAt []time.Time // when each claim was asked
	claimGot  []int       // rows each claim returned
	held      map[string]int64
	rows      int64 // rows claimed and not yet settled
	completed []string
	retries   []dialect.RetryItem
	dead      []dialect.DeadItem
	released  []string
	renewals  int
	commits   int
	onClaim   func(outstanding int64, p dialect.ClaimParams) // called under mu
}

func (d *fakeDialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	asked := time.Now()
	if d.claimDelay > 0 {
		select {
		case <-time.After(d.claimDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claims = append(d.claims, p)
	d.claimedAt = append(d.claimedAt, asked)
	if d.onClaim != nil {
		d.onClaim(d.rows, p)
	}
	var msgs []outbox.Message
	var err error
	switch {
	case d.claimFn != nil:
		msgs, err = d.claimFn(p)
	case len(d.batches) > 0:
		msgs, d.batches = d.batches[0], d.batches[1:]
	}
	if len(msgs) > p.Limit {
		return nil, fmt.Errorf("fake: %d rows for a claim of %d", len(msgs), p.Limit)
	}
	if d.held == nil {
		d.held = map[string]int64{}
	}
	d.claimGot = append(d.claimGot, len(msgs))
	d.held[p.Token] += int64(len(msgs))
	d.rows += int64(len(msgs))
	return msgs, err
}

func (d *fakeDialect) Renew(ctx context.Context, p dialect.RenewParams) (int64, error) {
	d.mu.Lock()
	d.renewals++
	held := d.held[p.Token]
	d.mu.Unlock()
	if d.renewDelay > 0 {
		select {
		case <-time.After(d.renewDelay):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if d.renewFn != nil {
		return d.renewFn()
	}
	return held, nil
}

// settled notes n rows of token settled; the caller holds mu.
func (d *fakeDialect) settled(token string, n int) int64 {
	if d.held == nil {
		d.held = map[string]int64{}
	}
	d.held[token] -= int64(n)
	d.rows -= int64(n)
	return int64(n)
}

func (d *fakeDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.completed = append(d.completed, p.IDs...)
	return d.settled(p.Token, len(p.IDs)), nil
}

func (d *fakeDialect) Retry(_ context.Context, p dialect.RetryParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retries = append(d.retries, p.Items...)
	return d.settled(p.Token, len(p.Items)), nil
}

func (d *fakeDialect) Dead(_ context.Context, p dialect.DeadParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = append(d.dead, p.Items...)
	return d.settled(p.Token, len(p.Items)), nil
}

func (d *fakeDialect) Release(_ context.Context, p dialect.ReleaseParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.released = append(d.released, p.IDs...)
	return d.settled(p.Token, len(p.IDs)), nil
}

func (d *fakeDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

// fakeState is a copy of what a fakeDialect recorded.
type fakeState struct {
	claims    int
	claimedAt []time.Time
	claimGot  []int
	completed []string
	retries   []dialect.RetryItem
	dead      []dialect.DeadItem
	released  []string
	renewals  int
	commits   int
}

func (d *fakeDialect) state() fakeState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fakeState{
		claims:    len(d.claims),
		claimedAt: append([]time.Time(nil), d.claimedAt...),
		claimGot:  append([]int(nil), d.claimGot...),
		completed: append([]string(nil), d.completed...),
		retries:   append([]dialect.RetryItem(nil), d.retries...),
		dead:      append([]dialect.DeadItem(nil), d.dead...),
		released:  append([]string(nil), d.released...),
		renewals:  d.renewals,
		commits:   d.commits,
	}
}

// retryOf is the retry recorded for row id, if any.
func (s fakeState) retryOf(id string) (dialect.RetryItem, bool) {
	for _, it := range s.retries {
		if it.ID == id {
			return it, true
		}
	}
	return dialect.RetryItem{}, false
}

// lockMode is the fake in lock mode (dialect.BatchCommitter): its writes
// count only once Commit, which answers commitErr, says so.
type lockMode struct{ *fakeDialect }

func (l lockMode) Commit(context.Context, string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits++
	return l.commitErr
}

var _ dialect.BatchCommitter = lockMode{}

// byTopic routes each row to the destination its topic names.
type byTopic struct{}

func (byTopic) Route(m *outbox.Message) (string, error) { return m.Topic, nil }

// rows returns n rows for destination dest, with ids prefix0, prefix1, …
// and distinct keys.
func rows(dest, prefix string, n int) []outbox.Message {
	out := make([]outbox.Message, n)
	for i := range out {
		id := fmt.Sprintf("%s%d", prefix, i)
		out[i] = outbox.Message{ID: id, Topic: dest, Key: id, MaxAttempts: 5}
	}
	return out
}

// newTestEngine returns an engine on db with dests, routed by topic, with
// a silent logger unless opt has one.
func newTestEngine(t *testing.T, db dialect.Dialect, dests map[string]destination.Destination, opt Options) *Engine {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e, err := New(db, byTopic{}, dests, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runEngine runs e until the returned stop is called (or the test ends);
// stop returns once Run has.
func runEngine(t *testing.T, e *Engine) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// acceptAll accepts every message.
type acceptAll struct{}

func (acceptAll) Publish(context.Context, []outbox.Message) error { return nil }
func (acceptAll) Close() error                                    { return nil }

// outcomeCount is an Observer that counts settled rows by destination and
// outcome, and back-pressure answers by limit.
type outcomeCount struct {
	NopObserver
	mu     sync.Mutex
	got    map[Outcome]int
	byDest map[string]map[Outcome]int
	full   map[string]int // Backpressure, by limit
}

func newOutcomeCount() *outcomeCount {
	return &outcomeCount{got: map[Outcome]int{}, byDest: map[string]map[Outcome]int{}, full: map[string]int{}}
}

func (c *outcomeCount) Backpressure(_, limit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.full[limit]++
}

func (c *outcomeCount) backpressure(limit string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.full[limit]
}

func (c *outcomeCount) Settled(dest string, o Outcome, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[o] += n
	if c.byDest[dest] == nil {
		c.byDest[dest] = map[Outcome]int{}
	}
	c.byDest[dest][o] += n
}

func (c *outcomeCount) snapshot() map[Outcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Outcome]int, len(c.got))
	for k, v := range c.got {
		out[k] = v
	}
	return out
}

func (c *outcomeCount) of(dest string, o Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byDest[dest][o]
}

func (c *outcomeCount) total() (n int) {
	for _, v := range c.snapshot() {
		n += v
	}
	return n
}
