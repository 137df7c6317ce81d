package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
)

// newSlowEngine returns an engine on db that routes every row to one
// slowDest, with opt and a silent logger.
func newSlowEngine(t *testing.T, db dialect.Dialect, opt relay.Options) (*relay.Engine, *slowDest) {
	t.Helper()
	dest := &slowDest{}
	r, err := router.New([]router.RouteSpec{{Pattern: "**", Destination: "slow"}})
	if err != nil {
		t.Fatal(err)
	}
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := relay.New(db, r, map[string]destination.Destination{"slow": dest}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e, dest
}

// runEngine runs e until the test ends.
func runEngine(t *testing.T, e *relay.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// peak counts calls in progress and remembers the most at once.
type peak struct{ now, max atomic.Int64 }

func (p *peak) enter() {
	n := p.now.Add(1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *peak) leave() { p.now.Add(-1) }

// overlapDialect is the PostgreSQL dialect with each claim slowed down and
// watched for overlap.
type overlapDialect struct {
	dialect.Dialect
	claims peak
}

func (d *overlapDialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.claims.enter()
	defer d.claims.leave()
	time.Sleep(5 * time.Millisecond)
	return d.Dialect.Claim(ctx, p)
}

// slowDest acks every batch after a pause and watches publishes overlap.
type slowDest struct {
	pubs peak
	sent atomic.Int64
}

func (d *slowDest) Publish(ctx context.Context, msgs []outbox.Message) error {
	d.pubs.enter()
	defer d.pubs.leave()
	time.Sleep(30 * time.Millisecond)
	d.sent.Add(int64(len(msgs)))
	return nil
}

func (d *slowDest) Close() error { return nil }

// TestClaimsTakeTurns: the claims of one engine never run at once (a second
// claim would race the first for the same rows), while its batches are
// still published side by side.
func TestClaimsTakeTurns(t *testing.T) {
	pg := testenv.Postgres(t)
	base, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	db := &overlapDialect{Dialect: base}
	e, dest := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 4, PollInterval: 10 * time.Millisecond})
	const rows = 400
	if _, err := pg.Pool.Exec(context.Background(), `INSERT INTO outbox (topic, payload)
		SELECT 'turns', json_build_object('i', i) FROM generate_series(1, $1) i`, rows); err != nil {
		t.Fatal(err)
	}
	runEngine(t, e)

	deadline := time.Now().Add(30 * time.Second)
	for dest.sent.Load() < rows && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := dest.sent.Load(); n != rows {
		t.Fatalf("published %d of %d rows", n, rows)
	}
	if m := db.claims.max.Load(); m != 1 {
		t.Errorf("up to %d claims ran at once, want 1", m)
	}
	if m := dest.pubs.max.Load(); m < 2 {
		t.Errorf("publishes never overlapped (at most %d at once): taking turns to claim must not serialise delivery", m)
	}
}

// scriptDialect is the base of the scripted dialects below: no database,
// only the methods the engine calls on the claim path; calling anything
// else panics the test (the embedded Dialect is nil). Nothing expires.
type scriptDialect struct{ dialect.Dialect }

func (scriptDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

// scriptMessage is row seq of a scripted dialect.
func scriptMessage(seq int64, topic, key string) outbox.Message {
	return outbox.Message{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", seq), Topic: topic,
		Key: key, Payload: []byte(`{}`), Sequence: seq, MaxAttempts: 5}
}

// headsDialect models a keyed table with fewer ready keys than a batch:
// a claim takes every head, so no claim finds anything until that batch is
// completed. It counts the claims that found nothing beside a batch in
// flight.
type headsDialect struct {
	scriptDialect
	mu              sync.Mutex
	open            string // token of the batch holding every head
	seq             int64
	batches, barren atomic.Int64
}

func (d *headsDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open != "" {
		d.barren.Add(1)
		return nil, nil
	}
	d.open = p.Token
	d.batches.Add(1)
	msgs := make([]outbox.Message, p.Limit)
	for i := range msgs {
		d.seq++
		msgs[i] = scriptMessage(d.seq, "heads", fmt.Sprintf("k%d", i))
	}
	return msgs, nil
}

func (d *headsDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open == p.Token {
		d.open = ""
	}
	return int64(len(p.IDs)), nil
}

// TestNoWakeForBarrenSiblings: when every ready head is in the batch just
// claimed, a full batch must not wake the idle sibling each time: its claim
// could only find nothing (while holding the claim turn). Before
// claimPolicy.barren, there was a barren claim per batch.
func TestNoWakeForBarrenSiblings(t *testing.T) {
	db := &headsDialect{}
	e, _ := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 100 * time.Millisecond, MaxPollInterval: 200 * time.Millisecond})
	runEngine(t, e)

	// 40 batches one after another, 30 ms of publishing each: ~1.2 s.
	deadline := time.Now().Add(30 * time.Second)
	for db.batches.Load() < 40 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	batches, barren := db.batches.Load(), db.barren.Load()
	if batches < 40 {
		t.Fatalf("only %d batches delivered", batches)
	}
	// Left: the first barren claim, which teaches the engine, and the idle
	// sibling's polls (at most one per 100 ms here): ~12 over 1.2 s.
	if barren > batches/2 {
		t.Errorf("%d claims found nothing over %d batches: idle siblings are still woken by every full batch", barren, batches)
	}
	t.Logf("%d batches, %d barren claims", batches, barren)
}

// keysDialect models a keyed table with deep backlogs: keys keys, each
// always with a next row, and a key is ready when no batch holds it. A claim
// takes up to Limit ready keys.
type keysDialect struct {
	scriptDialect
	keys            int
	mu              sync.Mutex
	held            map[string][]int // token -> keys it holds
	busy            map[int]bool
	seq             int64
	batches, barren atomic.Int64
	partial         atomic.Int64 // claims that found some rows, fewer than their limit
}

func (d *keysDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var msgs []outbox.Message
	for k := 0; k < d.keys && len(msgs) < p.Limit; k++ {
		if d.busy[k] {
			continue
		}
		d.busy[k] = true
		d.held[p.Token] = append(d.held[p.Token], k)
		d.seq++
		msgs = append(msgs, scriptMessage(d.seq, "keys", fmt.Sprintf("k%d", k)))
	}
	switch {
	case len(msgs) == 0:
		d.barren.Add(1)
	case len(msgs) < p.Limit:
		d.partial.Add(1)
		d.batches.Add(1)
	default:
		d.batches.Add(1)
	}
	return msgs, nil
}

func (d *keysDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range d.held[p.Token] {
		d.busy[k] = false
	}
	delete(d.held, p.Token)
	return int64(len(p.IDs)), nil
}

// TestClaimsSplitFewKeys: with exactly as many ready keys as a batch (1,000
// keys at batch 1,000 in the benchmark), one full claim takes every head and
// the sibling finds nothing until that batch is done: one batch in flight,
// claim, publish and complete strictly in turn. The engine must then claim
// smaller batches, so that both workers publish side by side, and each
// claim fills its limit: on PostgreSQL a claim that cannot fill it walks its
// whole window of candidates.
func TestClaimsSplitFewKeys(t *testing.T) {
	db := &keysDialect{keys: 10, held: map[string][]int{}, busy: map[int]bool{}}
	e, dest := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 50 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond})
	runEngine(t, e)

	deadline := time.Now().Add(30 * time.Second)
	for db.batches.Load() < 60 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	batches, barren, partial := db.batches.Load(), db.barren.Load(), db.partial.Load()
	if batches < 60 {
		t.Fatalf("only %d batches delivered", batches)
	}
	if partial > batches/4 {
		t.Errorf("%d of %d claims found fewer rows than they asked for", partial, batches)
	}
	if m := dest.pubs.max.Load(); m < 2 {
		t.Errorf("at most %d batch published at once: one full claim still takes every ready key", m)
	}
	if barren > batches/4 {
		t.Errorf("%d claims found nothing over %d batches", barren, batches)
	}
	t.Logf("%d batches, %d barren and %d partial claims, up to %d published at once", batches, barren, partial, dest.pubs.max.Load())
}

// burstDialect serves a script: each claim takes up to its limit of the
// pending rows (unkeyed), and after claim i the pending rows become
// refill[i] when the script has an entry for it. It records, for each
// claim, what it found and how many batches were open (claimed, not yet
// completed) when it ran.
type burstDialect struct {
	scriptDialect
	mu            sync.Mutex
	pending       int
	refill        map[int]int
	open          map[string]bool
	seq           int64
	found, beside []int // per claim: rows found, batches open meanwhile
}

func (d *burstDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if p.Window == 0 {
		// The unbounded claim after an empty window: the window here
		// holds every row, so it finds nothing either. Not part of the
		// script.
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := min(d.pending, p.Limit)
	d.pending -= n
	d.found, d.beside = append(d.found, n), append(d.beside, len(d.open))
	if r, ok := d.refill[len(d.found)]; ok {
		d.pending = r
	}
	if n == 0 {
		return nil, nil
	}
	d.open[p.Token] = true
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		d.seq++
		msgs[i] = scriptMessage(d.seq, "burst", "")
	}
	return msgs, nil
}

func (d *burstDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.open, p.Token)
	return int64(len(p.IDs)), nil
}

func (d *burstDialect) claims() (found, beside []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.found), slices.Clone(d.beside)
}

// TestBurstAfterABarrenWakeGetsTheSibling: a commit notification wakes both
// workers, and the one that claims second, beside the other's batch, finds
// nothing (barren). The other worker then goes on alone with the rows that
// trickle in, and a burst follows. The burst's first full batch must wake
// the sibling (once it is delivered, as every full batch does), which no
// poll would wake for seconds, so that the rest of the burst goes out in two
// batches side by side: a trickle that came back short ended the barren
// spell. Before, the sibling slept through the burst and one worker drained
// it batch after batch (docs/performance.md, lesson 30).
func TestBurstAfterABarrenWakeGetsTheSibling(t *testing.T) {
	// Claim numbers (1-based) and what follows them:
	//  1, 2:   both workers at start, nothing pending; both sleep.
	//  3, 4:   the first wake: 4 rows; the claim beside finds nothing and
	//          the claims are split into shares of 5.
	//  5:      the first worker, alone after its batch: nothing; both
	//          sleep.
	//  6, 7:   the second wake: 4 rows; the share beside finds nothing:
	//          barren. That worker sleeps its 10 s poll interval.
	//  8:      the first worker, alone: 3 rows (the trickle, short).
	//  9:      alone again: 5 of 15 rows, a full share, which must wake the
	//          sibling once delivered.
	//  10, 11: the two workers, 5 rows each, side by side.
	db := &burstDialect{open: map[string]bool{}, refill: map[int]int{5: 4, 7: 3, 8: 15}}
	wake := make(chan struct{}, 1)
	e, _ := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2,
		PollInterval: 10 * time.Second, MaxPollInterval: 10 * time.Second, Wake: wake})
	runEngine(t, e)

	waitClaims := func(n int) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool {
			found, _ := db.claims()
			return len(found) >= n
		}, "fewer than %d claims", n)
	}
	waitClaims(2)
	db.mu.Lock()
	db.pending = 4
	db.mu.Unlock()
	wake <- struct{}{}
	waitClaims(5)
	time.Sleep(20 * time.Millisecond) // both asleep again
	wake <- struct{}{}
	waitClaims(11)

	found, beside := db.claims()
	if want := []int{0, 0, 4, 0, 0, 4, 0, 3, 5, 5, 5}; !slices.Equal(found[:11], want) {
		t.Fatalf("claims found %v, want %v", found[:11], want)
	}
	if beside[6] != 1 {
		t.Fatalf("claim 7 ran beside %d batches, want 1 (the barren claim)", beside[6])
	}
	if beside[10] != 1 {
		t.Fatalf("claims found %v beside %v batches: the last two of the burst were not published side by side (the sibling slept)", found, beside)
	}
}

// queueDialect is an endless unkeyed table on a claim turn shared with other
// relays (dialect.ClaimTurnReporter): every claim fills its batch, and
// reports whether it queued for the turn as queued says.
type queueDialect struct {
	scriptDialect
	report func(bool)
	queued atomic.Bool
	seq    atomic.Int64
	claims atomic.Int64
	dry    atomic.Bool // the table is empty: claims find nothing
}

func (d *queueDialect) OnClaimTurn(f func(bool)) { d.report = f }

func (d *queueDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if d.dry.Load() {
		d.report(true)
		return nil, nil
	}
	msgs := make([]outbox.Message, p.Limit)
	for i := range msgs {
		msgs[i] = scriptMessage(d.seq.Add(1), "queue", "")
	}
	d.claims.Add(1)
	d.report(d.queued.Load())
	return msgs, nil
}

func (d *queueDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	return int64(len(p.IDs)), nil
}

// workersRecorder remembers the engine's ClaimWorkers reports.
type workersRecorder struct {
	relay.NopObserver
	counts guardedList[int]
}

func (r *workersRecorder) ClaimWorkers(n int) { r.counts.add(n) }

// TestSaturatedTurnClaimsWithOneWorker: while the claims queue for a claim
// turn that other relays keep busy, the engine's batches stop overlapping
// (one worker claims; more batches in flight would only add database work
// on a table whose claims run one at a time); once they no longer queue,
// both workers claim and publish side by side again.
func TestSaturatedTurnClaimsWithOneWorker(t *testing.T) {
	db := &queueDialect{}
	db.queued.Store(true)
	rec := &workersRecorder{}
	e, dest := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 10 * time.Millisecond,
		MaxPollInterval: 50 * time.Millisecond, Observer: rec})
	runEngine(t, e)

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; workers reported: %v", what, rec.counts.snapshot())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	has := func(want ...int) func() bool {
		return func() bool { return slices.Equal(rec.counts.snapshot(), want) }
	}
	waitFor("one claiming worker", has(2, 1))
	// Let the batch claimed before the change finish, then watch.
	time.Sleep(100 * time.Millisecond)
	dest.pubs.max.Store(dest.pubs.now.Load())
	from := db.claims.Load()
	waitFor("20 more claims", func() bool { return db.claims.Load() >= from+20 })
	if m := dest.pubs.max.Load(); m != 1 {
		t.Errorf("with the turn saturated, up to %d batches were published at once, want 1", m)
	}

	db.queued.Store(false)
	waitFor("both workers claiming again", has(2, 1, 2))
	from = db.claims.Load()
	dest.pubs.max.Store(0)
	waitFor("20 more claims", func() bool { return db.claims.Load() >= from+20 })
	if m := dest.pubs.max.Load(); m < 2 {
		t.Errorf("with the turn free again, batches never overlapped (at most %d at once)", m)
	}
}

// TestWorkerLeftOutLetsTheLastIdleWorkerArm: with relay.notify, the last
// worker to fall asleep asks producers to notify (Options.Arm). A worker
// left out while the claim turn is saturated counts as asleep; if it
// counted as awake, the one claiming worker would never be the last, and
// once the table ran dry nobody would arm: rows would wait for the polls.
func TestWorkerLeftOutLetsTheLastIdleWorkerArm(t *testing.T) {
	db := &queueDialect{}
	db.queued.Store(true)
	rec := &workersRecorder{}
	var arms atomic.Int64
	e, _ := newSlowEngine(t, db, relay.Options{BatchSize: 10, InflightBatches: 2, PollInterval: 10 * time.Millisecond,
		MaxPollInterval: 50 * time.Millisecond, Observer: rec,
		Arm: func(context.Context) (relay.Arming, error) { arms.Add(1); return relay.ArmWatched, nil }})
	runEngine(t, e)
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(rec.counts.snapshot(), []int{2, 1}) {
		if time.Now().After(deadline) {
			t.Fatalf("never down to one claiming worker: %v", rec.counts.snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := arms.Load(); n != 0 {
		t.Fatalf("armed %d times while the table was busy", n)
	}
	db.dry.Store(true)
	for arms.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the table ran dry with one worker left out, and nobody armed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
