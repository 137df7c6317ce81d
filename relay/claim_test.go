package relay

import (
	"testing"
	"time"
)

// TestClaimLimitFollowsReadyRows walks the claim size through its states:
// whole batches, split into shares when a batch finds fewer ready rows
// beside a batch in flight, a probe for whole batches after a run of full
// shares, and the probe's backoff.
func TestClaimLimitFollowsReadyRows(t *testing.T) {
	c := newClaimPolicy(1000, 2)
	want := func(step string, limit int) {
		t.Helper()
		if got := c.claimLimit(); got != limit {
			t.Fatalf("%s: claim limit %d, want %d", step, got, limit)
		}
	}
	wakes := func(step string, want bool) {
		t.Helper()
		if got := c.wakeSiblings(); got != want {
			t.Fatalf("%s: a full batch wakes the siblings: %v, want %v", step, got, want)
		}
	}
	want("new", 1000)

	// Alone, a short claim is the end of the backlog, not a sign of few
	// ready rows.
	c.claimed(300, 1000, 0)
	c.claimed(0, 1000, 0)
	want("short claims with nothing in flight", 1000)
	c.claimed(1000, 1000, 1)
	want("full claim", 1000)

	// Beside a batch in flight, a claim of a whole batch found nothing:
	// the batch in flight took every ready row. Split.
	c.claimed(0, 1000, 1)
	want("barren claim beside a batch", 500)
	wakes("after a split (the next full share takes the rest)", true)
	// A share that finds nothing beside a batch: fewer ready rows than a
	// share; the siblings are no longer woken.
	c.claimed(0, 500, 1)
	want("barren share", 500)
	wakes("barren share", false)
	c.claimed(200, 500, 1)
	wakes("a share beside a batch found rows", true)

	// Barren again. Alone, a full claim (every head in it, as before) and
	// an empty one (another relay may hold the heads) change nothing; a
	// short claim alone is the end of the backlog, and the next full batch
	// is a new backlog that the siblings should help with.
	c.claimed(0, 500, 1)
	c.claimed(500, 500, 0)
	c.claimed(0, 500, 0)
	wakes("barren, then a full and an empty claim alone", false)
	c.claimed(120, 500, 0)
	wakes("a short claim alone (the backlog ran out)", true)
	c.claimed(0, 500, 1)
	wakes("a barren share after the backlog ended", false)
	c.claimed(200, 500, 1)

	// minProbeAfter full shares, then one whole batch on probation.
	for i := range minProbeAfter {
		want("full shares", 500)
		c.claimed(500, 500, int64(i%2))
	}
	want("probe", 1000)
	// The probe comes back short beside a batch: shares again, and the
	// next probe waits twice as long.
	c.claimed(500, 1000, 1)
	want("failed probe", 500)
	for range 2*minProbeAfter - 1 {
		c.claimed(500, 500, 1)
	}
	want("before the second probe", 500)
	// A partial share breaks the run.
	c.claimed(499, 500, 1)
	for range 2 * minProbeAfter {
		c.claimed(500, 500, 1)
	}
	want("second probe", 1000)
	// This probe fills: whole batches stay, and the backoff resets.
	c.claimed(1000, 1000, 1)
	c.claimed(1000, 1000, 1)
	want("successful probe", 1000)
	c.claimed(10, 1000, 1)
	for range minProbeAfter {
		c.claimed(500, 500, 1)
	}
	want("probe after a reset backoff", 1000)

	// The probe's backoff is bounded.
	for range 20 {
		c.claimed(0, 1000, 1)
		for c.claimLimit() < 1000 {
			c.claimed(500, 500, 1)
		}
	}
	c.mu.Lock()
	after := c.probeAfter
	c.mu.Unlock()
	if after != maxProbeAfter {
		t.Fatalf("probe backoff %d after 20 failed probes, want the bound %d", after, maxProbeAfter)
	}

	// Alone, a claim of a whole batch that found at least a share but not
	// a batch: fewer ready heads than a batch (replicas that each hold one
	// batch). Split.
	alone := newClaimPolicy(1000, 2)
	alone.claimed(499, 1000, 0)
	if got := alone.claimLimit(); got != 1000 {
		t.Fatalf("alone, a claim that found less than a share: claim limit %d, want 1000", got)
	}
	alone.claimed(500, 1000, 0)
	if got := alone.claimLimit(); got != 500 {
		t.Fatalf("alone, a claim that found a share of a whole batch: claim limit %d, want 500", got)
	}

	// One batch in flight at most: nothing to split.
	one := newClaimPolicy(100, 1)
	one.claimed(0, 100, 1)
	one.claimed(30, 100, 1)
	if got := one.claimLimit(); got != 100 {
		t.Fatalf("InflightBatches 1: claim limit %d, want 100", got)
	}
}

// TestUnboundedClaimIgnoresBatchesInFlightNowAndThen: now and then an
// unbounded claim ignores the batches in flight in the window (wideScan),
// so that a batch that is always there (a deep key at the front) cannot
// keep the rows beyond the window waiting for ever: not in an engine's
// first wideScanMinWait, then until one comes back short, after which the
// next waits wideScanMinWait, or wideScanCostFactor × its cost if longer.
// A full one (rows were there) may be followed by another at once.
func TestUnboundedClaimIgnoresBatchesInFlightNowAndThen(t *testing.T) {
	c := newClaimPolicy(100, 2)
	if c.wideScan() {
		t.Fatal("a new engine's first unbounded claim is wide")
	}
	c.wideAfter = time.Now().Add(-time.Millisecond) // wideScanMinWait later
	if !c.wideScan() {
		t.Fatal("no wide claim wideScanMinWait after the start")
	}
	c.fullScanDone(true, 0, true)
	if !c.wideScan() {
		t.Fatal("a full wide claim put the next one off")
	}
	c.fullScanDone(false, time.Second, true)
	if c.wideScan() || time.Until(c.wideAfter) < wideScanMinWait-time.Second {
		t.Fatalf("after a short wide claim: wide %v, next in %v; want none before %v", c.wideScan(), time.Until(c.wideAfter), wideScanMinWait)
	}
	c.fullScanDone(false, 10*time.Second, true)
	if d := time.Until(c.wideAfter); d < wideScanCostFactor*10*time.Second-time.Second {
		t.Fatalf("after a 10 s short wide claim the next is in %v, want %v", d, wideScanCostFactor*10*time.Second)
	}

	// A wide claim that failed fast (a connection error) is tried again
	// after fullScanMaxWait; one that timed out after a long walk, after
	// wideScanCostFactor × that walk. Either way the full-scan backoff
	// grows as after a barren claim.
	c.fullScanDone(true, 0, false)
	c.fullScanFailed(time.Millisecond, true)
	if d := time.Until(c.wideAfter); d > fullScanMaxWait || d < fullScanMaxWait-time.Second {
		t.Fatalf("after a fast failed wide claim the next is in %v, want %v", d, fullScanMaxWait)
	}
	if c.scanWait != fullScanMinWait {
		t.Fatalf("after a failed claim the full-scan wait is %v, want %v", c.scanWait, fullScanMinWait)
	}
	c.fullScanFailed(10*time.Second, true)
	if d := time.Until(c.wideAfter); d < wideScanCostFactor*10*time.Second-time.Second {
		t.Fatalf("after a wide claim that failed after 10 s the next is in %v, want %v", d, wideScanCostFactor*10*time.Second)
	}
}
