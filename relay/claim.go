package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// The claim policy: bounded first, the whole backlog now and then.
//
// A claim scans pending rows in sequence order for heads of keys. When
// every head near the front is in flight (few keys, deep backlogs), an
// unbounded scan walks the whole backlog to find nothing: 1.5 s at 100,000
// pending rows (docs/claim.md). So each claim first looks at a window of
// claimWindowFactor × BatchSize sequence numbers from the first due pending
// row. The window can miss ready heads further back — when its rows all
// belong to keys whose head waits for a retry or sits behind an open
// circuit — so when it comes back empty while this engine has no batch in
// flight, the engine runs the unbounded claim, which takes nothing while
// another relay has one in the window (ClaimParams.IdleWindow: nothing may
// explain the emptiness); if that comes back short too, the next unbounded claim
// waits fullScanMinWait, doubling to fullScanMaxWait, and at least
// fullScanCostFactor times as long as the barren scan took: a full scan
// may cost a replica at most ~1/fullScanCostFactor of the database's time.
// (Other replicas' in-flight heads also empty the window; before this
// bound, two idle replicas re-walking a 50,000-row backlog every few
// seconds took a third of the database from the one replica that had
// work; before IdleWindow, each replica's first such walk came before any
// backoff.) An unbounded claim that IdleWindow kept from running counts as
// a short one for the backoff. Now and then one ignores the batches in
// flight all the same (wideScan: at most once per wideScanMinWait after a
// barren one), so that a batch that never ends cannot strand the rows
// beyond the window.
const (
	claimWindowFactor  = 4
	claimWindowMin     = 1000
	fullScanMinWait    = time.Second
	fullScanMaxWait    = 30 * time.Second
	fullScanCostFactor = 40
	// A wide unbounded claim (wideScan) that came back short waits at
	// least wideScanMinWait, and wideScanCostFactor × its cost, before the
	// next; the first comes wideScanMinWait after the engine starts.
	wideScanMinWait    = 5 * time.Minute
	wideScanCostFactor = 100
	minProbeAfter      = 8
	maxProbeAfter      = 256
)

// claimPolicy holds the state of the claim policy of one engine.
type claimPolicy struct {
	inflight atomic.Int64 // batches claimed and not yet settled

	// turn makes the claims of one engine take turns; publishing and
	// settling still overlap. Two claims of one replica at once race for
	// the same rows at the front of the claim index: the second skips the
	// rows the first has locked and walks on (keyed: it finds their heads
	// taken and scans the window for nothing). Taking turns, the second
	// claim starts after the first committed and goes straight to the next
	// rows. Three replicas drain faster and cost the database less per row
	// for it; one replica is unchanged (docs/performance.md, lesson 7).
	turn chan struct{} // capacity 1: holding a value is holding the turn

	// barren is set when a claim found nothing while another batch of this
	// engine was in flight, and cleared when such a claim found rows. Set,
	// a full batch does not wake the idle siblings: with fewer ready keys
	// than a batch (1,000 keys at batch 1,000), every head is in the batch
	// just claimed, and a woken sibling only scanned the claim window for
	// nothing while holding the claim turn the worker with the next heads
	// was waiting for (docs/performance.md, lesson 12). Idle siblings still
	// poll every MaxPollInterval, and a claim of theirs that finds rows
	// clears it, as does a claim with no batch in flight that comes back
	// short: the backlog ran out (lesson 30).
	barren atomic.Bool

	// limit is the size of the next claim (claimLimit): BatchSize, or
	// share (BatchSize ÷ InflightBatches, rounded up) while claims of
	// BatchSize are seen to find fewer ready rows than that. With as many
	// ready keys as a batch (1,000 keys at batch 1,000), one full claim
	// takes every head and the siblings find nothing until it is completed:
	// claim, publish and complete run strictly in turn, one batch in
	// flight. And a claim that cannot fill its limit walks its whole window
	// of candidates, testing each for head of its key (65 ms where a full
	// 500-row claim takes 29 ms). At share, the workers take half the heads
	// each, their batches overlap, and each claim stops when it is full
	// (docs/performance.md, lesson 13). Every probeAfter full claims at
	// share, one claim asks for BatchSize again: if it fills, the limit
	// stays there; if not, the next probe waits twice as long (up to
	// maxProbeAfter), like the full scan's backoff.
	limit        atomic.Int64
	batch, share int

	mu         sync.Mutex
	fullRun    int  // consecutive full claims at share
	probeAfter int  // full claims at share before the next probe
	probing    bool // the limit is back at BatchSize on probation
	scanAfter  time.Time
	scanWait   time.Duration
	wideAfter  time.Time // the next unbounded claim from then on is wide (wideScan)
}

// takeTurn waits for the engine's claim turn; false when stop is closed
// first. The holder gives the turn back with releaseTurn.
func (c *claimPolicy) takeTurn(stop <-chan struct{}) bool {
	select {
	case c.turn <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

func (c *claimPolicy) releaseTurn() { <-c.turn }

// claim runs the policy: a windowed claim, and the unbounded one when the
// window was empty and a full scan is due. The caller holds the claim turn.
func (e *Engine) claim(ctx context.Context, token string, limit int, poll bool) ([]outbox.Message, error) {
	p := dialect.ClaimParams{Token: token, Limit: limit, Lease: e.opt.Lease, Poll: poll,
		Window: max(claimWindowFactor*e.opt.BatchSize, claimWindowMin)}
	msgs, err := e.db.Claim(ctx, p)
	if err != nil || len(msgs) > 0 || !e.policy.fullScanDue() {
		return msgs, err
	}
	// The unbounded claim takes nothing while a batch of any relay is in
	// flight within the window (IdleWindow): that batch explains the empty
	// window as well as one of ours would, and once it is settled the
	// window has ready heads again, or the next unbounded claim runs.
	// Without it, with 1,000 keys at batch 1,000 and three replicas, the
	// heads sat in two replicas' batches and the third walked the whole
	// backlog for nothing (270–660 ms at 50,000 rows, holding the table's
	// claim turn; docs/performance.md, lesson 22). Judged on the claim's
	// own snapshot, after the claim turn: a pre-check in a statement of
	// its own raced with the claims between the two.
	//
	// Now and then an unbounded claim ignores the batches in flight
	// (wideScan): a batch that is always there (one deep key at the front,
	// its head always in another relay's batch; in lock mode, any
	// transaction holding the first due row) would otherwise keep the rows
	// beyond the window waiting for as long as it lasts. A wide claim that
	// comes back short walked the backlog for nothing, holding the claim
	// turn, so the next one waits wideScanMinWait, or wideScanCostFactor ×
	// its cost if longer; a full one may be followed by another at once.
	wide := e.policy.wideScan()
	p.Window = 0
	if wide {
		_ = wide
	}
	start := time.Now()
	msgs, err = e.db.Claim(ctx, p)
	switch {
	case err == nil:
		e.policy.fullScanDone(len(msgs) == p.Limit, time.Since(start), wide)
	case !errors.Is(err, dialect.ErrClaimTurnBusy):
		// A claim that failed (a timeout, say) waits like a barren one:
		// retried at every poll it could hold the claim turn each time.
		e.policy.fullScanFailed(time.Since(start), wide)
	}
	return msgs, err
}

func newClaimPolicy(batch, inflight int) *claimPolicy {
	c := &claimPolicy{turn: make(chan struct{}, 1), batch: batch,
		share: (batch + inflight - 1) / inflight, probeAfter: minProbeAfter,
		wideAfter: time.Now().Add(wideScanMinWait)}
	c.limit.Store(int64(batch))
	return c
}

// claimLimit is the size of the next claim.
func (c *claimPolicy) claimLimit() int { return int(c.limit.Load()) }

// claimed records what a claim of limit rows found: siblings is the number
// of other batches of this engine in flight while it ran.
func (c *claimPolicy) claimed(n, limit int, siblings int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit == c.batch && c.probing {
		// The first answer to a probe decides it.
		c.probing = false
		if n == limit {
			c.probeAfter = minProbeAfter
		} else {
			c.probeAfter = min(2*c.probeAfter, maxProbeAfter)
		}
	}
	switch {
	case limit > c.share && n < limit && (siblings > 0 || n >= c.share):
		// A claim of BatchSize found fewer ready rows than that while
		// this engine had a batch in flight, or found at least a share
		// but not a batch: the ready heads are fewer than a batch; claim
		// shares. The next full share wakes the siblings to take the
		// rest. (Without a sibling in flight, a claim that found less
		// than a share is the end of the backlog, or an idle table, and
		// says nothing. The second condition is for replicas that each
		// hold one batch, as three do at 1,000 keys and batch 1,000: they
		// asked for whole batches, found half, and walked their window
		// for the rest on every claim; performance.md, lesson 28.)
		c.limit.Store(int64(c.share))
		c.fullRun = 0
		c.barren.Store(false)
		return
	case limit < c.batch && n == limit:
		c.fullRun++
		if c.fullRun >= c.probeAfter {
			c.fullRun = 0
			c.probing = true
			c.limit.Store(int64(c.batch))
		}
	case limit < c.batch:
		c.fullRun = 0
	}
	switch {
	case siblings > 0:
		c.barren.Store(n == 0)
	case n > 0 && n < limit:
		// Alone, a claim found some ready rows and fewer than it asked
		// for: the backlog ran out. Whatever taught barren (every head in
		// the batch beside it) is over; the next full batch begins a new
		// backlog, and the siblings should help with it. Without this, a
		// sibling that a commit notification woke into a claim that found
		// nothing beside a batch kept the siblings asleep through every
		// later burst: one batch in flight, the rows committed during a
		// slow publish waiting for it (docs/performance.md, lesson 30).
		c.barren.Store(false)
	}
}

// wakeSiblings reports whether a full batch should wake the idle siblings.
func (c *claimPolicy) wakeSiblings() bool { return !c.barren.Load() }

// fullScanDue reports whether an unbounded claim may run now: no batch of
// this engine is in flight and the backoff after a barren one has passed.
func (c *claimPolicy) fullScanDue() bool {
	if c.inflight.Load() > 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !time.Now().Before(c.scanAfter)
}

// fullScanDone records an unbounded claim that took took: a full one (it
// stopped at its limit, cheaply) resets the backoff, a short one doubles
// it, and makes it at least fullScanCostFactor × took.
//
// wide says the claim ignored the batches in flight (wideScan): a short
// one puts the next wide claim off by wideScanMinWait, or
// wideScanCostFactor × took if longer.
func (c *claimPolicy) fullScanDone(full bool, took time.Duration, wide bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wide && !full {
		c.wideAfter = time.Now().Add(max(wideScanMinWait, wideScanCostFactor*took))
	}
	if full {
		c.scanWait, c.scanAfter = 0, time.Time{}
		return
	}
	c.scanWait = min(max(2*c.scanWait, fullScanMinWait, fullScanCostFactor*took), fullScanMaxWait)
	c.scanAfter = time.Now().Add(c.scanWait)
}

// fullScanFailed records an unbounded claim that failed after took: the
// next waits as after a barren one. A wide one that failed is tried again
// after fullScanMaxWait, or wideScanCostFactor × took if longer: a walk
// that timed out is put off as if it had come back short, a connection
// error soon.
func (c *claimPolicy) fullScanFailed(took time.Duration, wide bool) {
	c.fullScanDone(false, took, false)
	if wide {
		c.mu.Lock()
		c.wideAfter = time.Now().Add(max(fullScanMaxWait, wideScanCostFactor*took))
		c.mu.Unlock()
	}
}

// startWideClock starts the wait for the first wide claim: wideScanMinWait
// after the engine starts to run.
func (c *claimPolicy) startWideClock() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wideAfter = time.Now().Add(wideScanMinWait)
}

// wideScan reports whether the next unbounded claim ignores the batches in
// flight in the window (dialect.ClaimParams.IdleWindow unset).
func (c *claimPolicy) wideScan() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !time.Now().Before(c.wideAfter)
}
