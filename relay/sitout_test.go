package relay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// The hand-over of a worker that its own claim leaves out (turnShare): the
// claim's report of a queued turn is what halves the count, so the worker
// learns it is out only after the claim, with whatever that claim left it
// owing the others.

type oneRouter struct{}

func (oneRouter) Route(*outbox.Message) (string, error) { return "d", nil }

type nopDest struct{}

func (nopDest) Publish(context.Context, []outbox.Message) error { return nil }
func (nopDest) Close() error                                    { return nil }

// saturatedDialect reports every turn claim queued (other relays hold the
// turn) and returns rows rows in all, then nothing; it logs what happens.
type saturatedDialect struct {
	dialect.Dialect
	report func(bool)
	mu     sync.Mutex
	events []string
	rows   int
	seq    int64
}

func (d *saturatedDialect) OnClaimTurn(f func(bool)) { d.report = f }

func (d *saturatedDialect) add(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, s)
}

func (d *saturatedDialect) log() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.events)
}

func (d *saturatedDialect) Claim(_ context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.report(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	n := min(d.rows, p.Limit)
	d.rows -= n
	d.events = append(d.events, fmt.Sprintf("claim=%d", n))
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		d.seq++
		msgs[i] = outbox.Message{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", d.seq), Topic: "t",
			Payload: []byte(`{}`), Sequence: d.seq, MaxAttempts: 5}
	}
	return msgs, nil
}

func (d *saturatedDialect) Complete(_ context.Context, p dialect.CompleteParams) (int64, error) {
	return int64(len(p.IDs)), nil
}

// awaitWake runs worker 1 of e alone, as if worker 0 were asleep in its
// poll (counted asleep), with a turn saturated long enough that the next
// queued report halves the count, and fails with failure unless the channel
// worker 0 sleeps on is closed within 5 s. Worker 1 has stopped when it
// returns.
func awaitWake(t *testing.T, e *Engine, db *saturatedDialect, failure string) {
	t.Helper()
	e.share.queued, e.share.since = 1, 100
	e.awake.Store(1)
	wake := e.wakeChan()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.worker(ctx, 1); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: %v", failure, db.log())
	}
}

// TestLeftOutAfterAFreshArmingWakesTheOthers: the last worker to fall idle
// arms, and ArmFresh means one more claim is owed (rows committed before
// the arming did not notify). If the empty claim before it left the worker
// out, it sits out instead of claiming: it must wake the worker that still
// claims, or those rows wait for that worker's poll, up to MaxPollInterval.
func TestLeftOutAfterAFreshArmingWakesTheOthers(t *testing.T) {
	db := &saturatedDialect{}
	fresh := true
	e, err := New(db, oneRouter{}, map[string]destination.Destination{"d": nopDest{}}, Options{
		BatchSize: 10, InflightBatches: 2, PollInterval: 5 * time.Second, MaxPollInterval: 5 * time.Second,
		Arm: func(context.Context) (Arming, error) {
			if fresh {
				fresh = false
				db.add("arm=fresh")
				return ArmFresh, nil
			}
			db.add("arm=watched")
			return ArmWatched, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	awaitWake(t, e, db, "after a fresh arming the worker sat out, and nobody was woken to claim once more")
	if ev := db.log(); !slices.Contains(ev, "arm=fresh") || e.share.workers() != 1 {
		t.Fatalf("the scene did not play: events %v, %d workers", ev, e.share.workers())
	}
}

// TestLeftOutAfterABatchWakesTheOthers: a worker whose claim found rows and
// left it out hands the table over: the worker that still claims may be
// asleep, its polls backed off while the turn was busy, with rows ready.
func TestLeftOutAfterABatchWakesTheOthers(t *testing.T) {
	db := &saturatedDialect{rows: 1000}
	e, err := New(db, oneRouter{}, map[string]destination.Destination{"d": nopDest{}}, Options{
		BatchSize: 10, InflightBatches: 2, PollInterval: 100 * time.Millisecond, MaxPollInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	awaitWake(t, e, db, "left out after a batch with rows still ready, the worker woke nobody")
	if ev := db.log(); len(ev) == 0 || !strings.HasPrefix(ev[0], "claim=10") || e.share.workers() != 1 {
		t.Fatalf("the scene did not play: events %v, %d workers", ev, e.share.workers())
	}
}
