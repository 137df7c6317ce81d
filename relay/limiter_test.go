package relay

import (
	"testing"
	"time"
)

// rounds answers n full rounds of rows at latency rtt, with the limit used
// as far as used (a fraction), and returns the limit after each.
func rounds(l *limiter, n int, rtt time.Duration, used float64, congested bool) []int {
	var out []int
	for range n {
		limit := l.current()
		for range limit {
			l.record(rtt, int(float64(limit)*used), congested)
		}
		out = append(out, l.current())
	}
	return out
}

// TestLimiterSlowStartReachesTheCap: a destination whose latency does not
// change with the load (a receiver that answers in 50 ms at any
// concurrency) drives the limit from its start to the hard cap by doubling,
// in a handful of rounds, and never past the cap.
func TestLimiterSlowStartReachesTheCap(t *testing.T) {
	l := newLimiter(100, 1000)
	got := rounds(l, 6, 50*time.Millisecond, 1, false)
	want := []int{200, 400, 800, 1000, 1000, 1000}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("limits after each round %v, want %v", got, want)
		}
	}
}

// TestLimiterBacksOffAndGrowsAdditively: an answer that says the
// destination struggles (down, full, a timeout) cuts the limit to 70 %; so
// does a round whose latency more than doubled. After that the limit grows
// by a twentieth per round, not by doubling.
func TestLimiterBacksOffAndGrowsAdditively(t *testing.T) {
	l := newLimiter(100, 1000)
	rounds(l, 1, 10*time.Millisecond, 1, false) // 200
	if got := rounds(l, 1, 10*time.Millisecond, 1, true); got[0] != 140 {
		t.Fatalf("after a congested round the limit is %d, want 140", got[0])
	}
	if got := rounds(l, 1, 10*time.Millisecond, 1, false); got[0] != 147 {
		t.Fatalf("after a good round past the first congestion the limit is %d, want 147 (+1/20)", got[0])
	}
	if got := rounds(l, 1, 80*time.Millisecond, 1, false); got[0] != 102 {
		t.Fatalf("after a round at 8x the base latency the limit is %d, want 102 (x0.7)", got[0])
	}
	for range 200 {
		rounds(l, 1, time.Millisecond, 1, true)
	}
	if l.current() != limitFloor {
		t.Fatalf("a destination that always struggles is left %d rows, want the floor of %d", l.current(), limitFloor)
	}
	capped := newLimiter(4, 4)
	for range 20 {
		rounds(capped, 1, time.Millisecond, 1, true)
	}
	if capped.current() != 4 {
		t.Fatalf("under a hard cap of 4 (below the floor) a destination that always struggles is left %d rows, want 4", capped.current())
	}
}

// TestLimiterDoesNotGrowUnused: rounds that used less than half the limit
// leave it where it is: a burst after a quiet spell does not meet a limit
// no answer has vouched for.
func TestLimiterDoesNotGrowUnused(t *testing.T) {
	l := newLimiter(100, 1000)
	if got := rounds(l, 5, 10*time.Millisecond, 0.2, false); got[4] != 100 {
		t.Fatalf("limit after unused rounds %v, want it to stay 100", got)
	}
}

// TestLimiterForgetsAnOldBaseLatency: a destination whose latency rose for
// good is not taken for congested for ever: the lowest latency is forgotten
// after baseSpan.
func TestLimiterForgetsAnOldBaseLatency(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(40, 1000)
	l.now = func() time.Time { return now }
	rounds(l, 1, time.Millisecond, 1, false) // base 1 ms, limit 80
	rounds(l, 1, 50*time.Millisecond, 1, false)
	if l.current() != 56 {
		t.Fatalf("limit %d after the latency rose 50x, want 56", l.current())
	}
	now = now.Add(baseSpan + time.Second)
	rounds(l, 1, 50*time.Millisecond, 1, false) // the new base
	before := l.current()
	rounds(l, 3, 50*time.Millisecond, 1, false)
	if l.current() <= before {
		t.Fatalf("limit %d -> %d at a steady 50 ms after the old base was forgotten, want growth", before, l.current())
	}
}
