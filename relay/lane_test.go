package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// holdOne is a destination.Streamer that answers every message at once,
// except held: that one's answer waits until release is closed (or the
// publish is cut). It counts the calls to Publish, which the engine must
// not make on a Streamer.
type holdOne struct {
	held     string
	release  chan struct{}
	plain    atomic.Int64
	answered atomic.Int64 // messages answered at once
	at       atomic.Int64 // when the last of them was (UnixNano)
}

func (h *holdOne) Publish(context.Context, []outbox.Message) error {
	h.plain.Add(1)
	return errors.New("Publish called on a Streamer")
}
func (*holdOne) Close() error { return nil }

func (h *holdOne) PublishEach(ctx context.Context, msgs []outbox.Message, done func(int, error)) {
	var wg sync.WaitGroup
	for i, m := range msgs {
		if m.ID != h.held {
			done(i, nil)
			h.at.Store(time.Now().UnixNano())
			h.answered.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-h.release:
				done(i, nil)
			case <-ctx.Done():
				done(i, ctx.Err())
			}
		}()
	}
	wg.Wait()
}

var _ destination.Streamer = (*holdOne)(nil)

// TestSlowRowHoldsOnlyItself: with a destination that answers each row as
// its answer comes (destination.Streamer), a row whose answer is held back
// holds only itself: the other rows of its claim are settled (written and
// reported) while it is out, and the claimer claims again and the next
// claim's rows are settled too. Once its answer comes, it settles.
func TestSlowRowHoldsOnlyItself(t *testing.T) {
	t.Parallel()
	db := &fakeDialect{batches: [][]outbox.Message{rows("d", "a", 4), rows("d", "b", 3)}}
	dest := &holdOne{held: "a1", release: make(chan struct{})}
	obs := newOutcomeCount()
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest},
		Options{Observer: obs, PollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
			ShutdownTimeout: 200 * time.Millisecond})
	stop := runEngine(t, e)

	others := []string{"a0", "a2", "a3", "b0", "b1", "b2"}
	testenv.Eventually(t, 5*time.Second, func() bool {
		return len(db.state().completed) == len(others) && obs.of("d", OutcomeSent) == len(others)
	}, "the rows answered at once were not all settled while a1 was out")
	s := db.state()
	got := slices.Sorted(slices.Values(s.completed))
	if !slices.Equal(got, others) || len(s.released)+len(s.retries) != 0 {
		t.Fatalf("while a1 is out: completed %v, released %v, retried %v; want %v completed", got, s.released, s.retries, others)
	}
	if s.claims < 2 || s.claimGot[1] != 3 {
		t.Fatalf("claims %v while a1 is out; want the second claim taken", s.claimGot)
	}

	close(dest.release)
	testenv.Eventually(t, 5*time.Second, func() bool {
		return len(db.state().completed) == len(others)+1 && obs.of("d", OutcomeSent) == len(others)+1
	}, "a1 was not settled once answered")
	stop()
	if s := db.state(); s.completed[len(s.completed)-1] != "a1" {
		t.Errorf("completed %v, want a1 last", s.completed)
	}
	if n := dest.plain.Load(); n != 0 {
		t.Errorf("Publish called %d times on a Streamer", n)
	}
}

// TestLockModeWritesAClaimWhole: in lock mode a claim's rows are written,
// and its transaction committed, only once every row of it has an
// outcome: the rows answered at once wait for the one held back (well past
// settleDelay, while a later claim is written and committed), then all of
// them are written and committed together.
func TestLockModeWritesAClaimWhole(t *testing.T) {
	t.Parallel()
	dest := &holdOne{held: "a1", release: make(chan struct{})}
	db := &fakeDialect{}
	first, second := rows("d", "a", 3), rows("d", "b", 1)
	// The second claim finds its row only once a0 and a2 were answered
	// more than a few settleDelays ago: a settler that wrote them apart
	// from a1 would have done so by then.
	db.claimFn = func(dialect.ClaimParams) ([]outbox.Message, error) {
		switch {
		case first != nil:
			defer func() { first = nil }()
			return first, nil
		case second != nil && dest.answered.Load() == 2 && time.Since(time.Unix(0, dest.at.Load())) > 5*settleDelay:
			defer func() { second = nil }()
			return second, nil
		}
		return nil, nil
	}
	obs := newOutcomeCount()
	e := newTestEngine(t, lockMode{db}, map[string]destination.Destination{"d": dest},
		Options{Observer: obs, PollInterval: 10 * time.Millisecond, MaxPollInterval: 10 * time.Millisecond,
			ShutdownTimeout: 200 * time.Millisecond})
	stop := runEngine(t, e)
	testenv.Eventually(t, 5*time.Second, func() bool { return db.state().commits >= 1 }, "the second claim was not committed")
	if s := db.state(); !slices.Equal(s.completed, []string{"b0"}) || obs.of("d", OutcomeSent) != 1 {
		t.Fatalf("while a1 is out: completed %v, %d reported sent; want only the second claim's b0", s.completed, obs.of("d", OutcomeSent))
	}
	close(dest.release)
	testenv.Eventually(t, 5*time.Second, func() bool { return db.state().commits == 2 }, "the first claim was not committed once a1 answered")
	stop()
	s := db.state()
	if got := slices.Sorted(slices.Values(s.completed[1:])); !slices.Equal(got, []string{"a0", "a1", "a2"}) || s.commits != 2 || obs.of("d", OutcomeSent) != 4 {
		t.Fatalf("completed %v in %d commits, %d reported sent; want a0, a1, a2 written and committed together", s.completed, s.commits, obs.of("d", OutcomeSent))
	}
}

// jittery is a destination.Streamer that answers each message after a
// random delay of up to a few milliseconds.
type jittery struct{ sent atomic.Int64 }

func (j *jittery) Publish(ctx context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	j.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}
func (*jittery) Close() error { return nil }

func (j *jittery) PublishEach(_ context.Context, msgs []outbox.Message, done func(int, error)) {
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	for i := range msgs {
		time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, func() {
			defer wg.Done()
			j.sent.Add(1)
			done(i, nil)
		})
	}
	wg.Wait()
}

// TestMaxInflightIsNeverExceeded: on a table that always has ready rows,
// the rows claimed and not yet settled never exceed MaxInflight, counted
// by the table at every claim, and the budget is used (it fills up).
func TestMaxInflightIsNeverExceeded(t *testing.T) {
	t.Parallel()
	const batch, maxInflight = 10, 35
	var (
		mu         sync.Mutex
		peak       int64
		violations []string
	)
	db := &fakeDialect{}
	n := 0
	db.onClaim = func(outstanding int64, p dialect.ClaimParams) {
		mu.Lock()
		defer mu.Unlock()
		after := outstanding + int64(p.Limit)
		peak = max(peak, after)
		if after > maxInflight || p.Limit > batch {
			violations = append(violations, fmt.Sprintf("a claim of %d with %d rows out", p.Limit, outstanding))
		}
	}
	db.claimFn = func(p dialect.ClaimParams) ([]outbox.Message, error) {
		n++
		out := make([]outbox.Message, p.Limit)
		for i := range out {
			id := fmt.Sprintf("c%d-%d", n, i)
			out[i] = outbox.Message{ID: id, Topic: []string{"x", "y"}[i%2], Key: id, MaxAttempts: 5}
		}
		return out, nil
	}
	x, y := &jittery{}, &jittery{}
	e := newTestEngine(t, db, map[string]destination.Destination{"x": x, "y": y},
		Options{BatchSize: batch, MaxInflight: maxInflight, PollInterval: 5 * time.Millisecond})
	stop := runEngine(t, e)
	testenv.Eventually(t, 10*time.Second, func() bool { return db.state().claims >= 300 }, "too few claims")
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("MaxInflight %d exceeded %d times, first: %s", maxInflight, len(violations), violations[0])
	}
	if peak < maxInflight-batch/2 {
		t.Fatalf("at most %d rows out after a claim: the budget of %d never filled, the test proves nothing", peak, maxInflight)
	}
	if x.sent.Load() == 0 || y.sent.Load() == 0 {
		t.Fatalf("sent %d to x and %d to y, want both", x.sent.Load(), y.sent.Load())
	}
}

// holdAll is a destination.Streamer that answers nothing until release is
// closed (or the publish is cut), and counts the rows it holds.
type holdAll struct {
	release   chan struct{}
	out, peak atomic.Int64
}

func (h *holdAll) Publish(ctx context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	h.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}
func (*holdAll) Close() error { return nil }

func (h *holdAll) PublishEach(ctx context.Context, msgs []outbox.Message, done func(int, error)) {
	n := h.out.Add(int64(len(msgs)))
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	var err error
	select {
	case <-h.release:
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.out.Add(-int64(len(msgs)))
	for i := range msgs {
		done(i, err)
	}
}

// counting accepts every message and counts them.
type counting struct{ n atomic.Int64 }

func (c *counting) Publish(_ context.Context, msgs []outbox.Message) error {
	c.n.Add(int64(len(msgs)))
	return nil
}
func (*counting) Close() error { return nil }

// TestDestinationOverItsShareIsDeferred: with two destinations, one holds
// at most three quarters of MaxInflight, published and queued. A slow
// destination's rows beyond its share are deferred (retried with their
// attempt unchanged, after a delay) instead of taking the whole budget,
// and the other destination keeps receiving.
func TestDestinationOverItsShareIsDeferred(t *testing.T) {
	t.Parallel()
	const batch, maxInflight = 10, 40
	const share = maxInflight * 3 / 4
	db := &fakeDialect{}
	n := 0
	db.claimFn = func(p dialect.ClaimParams) ([]outbox.Message, error) {
		n++
		out := make([]outbox.Message, p.Limit)
		for i := range out {
			id := fmt.Sprintf("c%d-%d", n, i)
			out[i] = outbox.Message{ID: id, Topic: []string{"slow", "fast"}[i%2], Key: id, Attempt: 2, MaxAttempts: 5}
		}
		return out, nil
	}
	slow, fast := &holdAll{release: make(chan struct{})}, &counting{}
	obs := newOutcomeCount()
	e := newTestEngine(t, db, map[string]destination.Destination{"slow": slow, "fast": fast},
		Options{BatchSize: batch, MaxInflight: maxInflight, PollInterval: 5 * time.Millisecond, Observer: obs,
			ShutdownTimeout: 200 * time.Millisecond})
	stop := runEngine(t, e)
	testenv.Eventually(t, 5*time.Second, func() bool { return obs.of("slow", OutcomeDeferred) > 0 }, "no row of the slow destination was deferred")
	before := fast.n.Load()
	testenv.Eventually(t, 5*time.Second, func() bool { return fast.n.Load() >= before+100 },
		"the fast destination stopped receiving while the slow one held its share (%d rows before)", before)
	close(slow.release)
	stop()

	s := db.state()
	slowRows := 0
	for _, it := range s.retries {
		if !isSlowID(it.ID) {
			t.Fatalf("retry of %s, a row of the fast destination: %+v", it.ID, it)
		}
		slowRows++
		if it.Attempt != 2 || it.Delay <= 0 || !strings.Contains(it.Error, "share") {
			t.Fatalf("deferred row %+v; want its attempt unchanged (2), a delay, and the reason", it)
		}
	}
	if slowRows == 0 || obs.of("fast", OutcomeDeferred)+obs.of("fast", OutcomeRetry) != 0 {
		t.Fatalf("%d slow rows deferred; fast rows deferred %d, retried %d", slowRows, obs.of("fast", OutcomeDeferred), obs.of("fast", OutcomeRetry))
	}
	if p := slow.peak.Load(); p > share {
		t.Fatalf("the slow destination held %d rows at once, over its share of %d", p, share)
	}
}

// TestQuickDestinationOverItsShareKeepsItsRows: a destination that answers
// in a millisecond and is only ahead of its publishes takes rows over its
// share: deferring them would make their keys wait the backoff's base,
// hundreds of times longer than its queue takes. A destination that answers
// in seconds, or whose rows in flight have gone unanswered, defers them.
func TestQuickDestinationOverItsShareKeepsItsRows(t *testing.T) {
	t.Parallel()
	const maxInflight = 1000
	e := newTestEngine(t, &fakeDialect{}, map[string]destination.Destination{"a": acceptAll{}, "b": acceptAll{}},
		Options{BatchSize: 100, MaxInflight: maxInflight, Backoff: Backoff{Base: time.Second, Max: time.Minute}})
	offerOverShare := func(rtt time.Duration, unanswered time.Duration) (taken int) {
		l := newLane(e, "a", acceptAll{}, maxInflight, maxInflight*3/4)
		for range 64 { // rounds at rtt: the limit reaches the cap
			for range l.limit.current() {
				l.limit.record(rtt, l.limit.current(), false)
			}
		}
		l.queued, l.inflight = 650, 100 // the lane holds its share
		l.answered = time.Now().Add(-unanswered)
		msgs := make([]*outbox.Message, 100)
		for i := range msgs {
			msgs[i] = &outbox.Message{ID: fmt.Sprint(i), Key: fmt.Sprint(i)}
		}
		l.offer(&claim{}, msgs)
		return l.queued - 650
	}
	if n := offerOverShare(time.Millisecond, 0); n != 100 {
		t.Fatalf("a destination answering in 1 ms took %d of 100 rows over its share, want all", n)
	}
	if n := offerOverShare(2*time.Second, 0); n != 0 {
		t.Fatalf("a destination answering in 2 s took %d rows over its share, want none", n)
	}
	if n := offerOverShare(time.Millisecond, 5*time.Second); n != 0 {
		t.Fatalf("a destination with no answer for 5 s took %d rows over its share, want none", n)
	}
}

// isSlowID reports whether a row id of TestDestinationOverItsShareIsDeferred
// ("c<claim>-<i>") is the slow destination's: even i.
func isSlowID(id string) bool {
	var c, i int
	if _, err := fmt.Sscanf(id, "c%d-%d", &c, &i); err != nil {
		return false
	}
	return i%2 == 0
}

// fullOnce answers its first publish that it has no room for any message
// (outbox.NoRoom, limit http_429), and accepts the later ones; it counts
// its publishes.
type fullOnce struct{ calls atomic.Int64 }

func (f *fullOnce) Publish(_ context.Context, msgs []outbox.Message) error {
	if f.calls.Add(1) > 1 {
		return nil
	}
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = outbox.NoRoom("http_429", errors.New("429 Too Many Requests"))
	}
	return destination.NewBatchError(errs)
}
func (*fullOnce) Close() error { return nil }

// TestFullDestinationPausesWithoutSpendingAttempts: a destination that
// answers it has no room (outbox.NoRoom) for fullAnswers rows in a row
// pauses: its rows wait the
// pause (1 s, with no Retry-After) without spending an attempt, the
// back-pressure is reported with its limit, and rows claimed during the
// pause are deferred without being published, their reason naming the
// limit.
func TestFullDestinationPausesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	first := rows("d", "a", fullAnswers)
	second := rows("d", "b", 2)
	for i := range first {
		first[i].Attempt = 1
	}
	for i := range second {
		second[i].Attempt = 1
	}
	db := &fakeDialect{batches: [][]outbox.Message{first, second}}
	dest := &fullOnce{}
	obs := newOutcomeCount()
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest},
		Options{Observer: obs, PollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})
	stop := runEngine(t, e)
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().retries) == fullAnswers+2 }, "the rows were not all deferred")
	circuit := e.Circuits()["d"]
	stop()
	s := db.state()
	for _, it := range s.retries {
		// Each row waits what is left of the pause when it is deferred.
		if it.Attempt != 1 || it.Delay <= fullFor/2 || it.Delay > fullFor || !strings.Contains(it.Error, "429") {
			t.Errorf("retry %+v; want attempt 1 unchanged, the rest of the %v pause, the answer named", it, fullFor)
		}
		if strings.HasPrefix(it.ID, "b") && !strings.Contains(it.Error, "no room (http_429)") {
			t.Errorf("row %s kept back during the pause: reason %q, want the limit named", it.ID, it.Error)
		}
	}
	if n := dest.calls.Load(); n != 1 {
		t.Errorf("%d publishes, want 1: the rows claimed during the pause are not published", n)
	}
	if circuit != BreakerOpen || obs.backpressure("http_429") != fullAnswers || obs.of("d", OutcomeDeferred) != fullAnswers+2 {
		t.Errorf("circuit %v, back-pressure %d, deferred %d; want open, %d, %d", circuit, obs.backpressure("http_429"), obs.of("d", OutcomeDeferred), fullAnswers, fullAnswers+2)
	}
}
