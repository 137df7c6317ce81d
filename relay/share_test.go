package relay

import (
	"os"
	"strings"
	"testing"
)

// feed reports n claims, queued or not, and returns the worker count after
// the last one and how many times it changed.
func feed(s *turnShare, n int, queued bool) (workers, changes int) {
	workers = s.workers()
	for range n {
		from, to := s.report(queued)
		if from != to {
			changes++
		}
		workers = to
	}
	return workers, changes
}

// feedPattern reports n claims of which the first q of every m queued.
func feedPattern(s *turnShare, n, q, m int) (workers int) {
	for i := range n {
		_, workers = s.report(i%m < q)
	}
	return workers
}

// untilChange reports queued claims until the count changes, and returns
// how many it took; t fails beyond limit.
func untilChange(t *testing.T, s *turnShare, queued bool, limit int) int {
	t.Helper()
	for n := 1; n <= limit; n++ {
		if from, to := s.report(queued); from != to {
			return n
		}
	}
	t.Fatalf("no change within %d claims (queued=%v, %d workers)", limit, queued, s.workers())
	return 0
}

// TestTurnShareHalvesWhileSaturated: claims that mostly queue halve the
// workers, one step per minSpell claims, down to one and no further; a share
// below shedAt leaves them.
func TestTurnShareHalvesWhileSaturated(t *testing.T) {
	s := newTurnShare(8)
	// From nothing, the average reaches 0.75 after 44 queued claims.
	if n := untilChange(t, s, true, 100); n != 44 || s.workers() != 4 {
		t.Fatalf("first halving after %d claims to %d workers, want 44 and 4", n, s.workers())
	}
	if n := untilChange(t, s, true, 100); n != minSpell || s.workers() != 2 {
		t.Fatalf("second halving after %d claims to %d workers, want %d and 2", n, s.workers(), minSpell)
	}
	if n := untilChange(t, s, true, 100); n != minSpell || s.workers() != 1 {
		t.Fatalf("third halving after %d claims to %d workers, want %d and 1", n, s.workers(), minSpell)
	}
	if w, c := feed(s, 500, true); w != 1 || c != 0 {
		t.Fatalf("below one worker: %d workers after %d changes", w, c)
	}

	// 11 of every 16 queued (0.69, below shedAt): no halving.
	s = newTurnShare(2)
	if w := feedPattern(s, 1000, 11, 16); w != 2 {
		t.Fatalf("%d workers with 11 of 16 claims queued, want 2", w)
	}
	// 13 of 16 (0.81): halved.
	if w := feedPattern(s, 200, 13, 16); w != 1 {
		t.Fatalf("%d workers with 13 of 16 claims queued, want 1", w)
	}
}

// TestTurnShareRaisesWhenTheTurnHasRoom: at one worker, a share of queued
// claims at or above raiseAt keeps it (the turn is still saturated with
// fewer batches in flight); below it, the workers double back.
func TestTurnShareRaisesWhenTheTurnHasRoom(t *testing.T) {
	s := newTurnShare(2)
	feed(s, 100, true)
	if s.workers() != 1 {
		t.Fatal("did not halve")
	}
	if w := feedPattern(s, 1000, 3, 5); w != 1 { // 0.6, interleaved
		t.Fatalf("%d workers with 3 of 5 claims queued at one worker, want 1", w)
	}
	if n := untilChange(t, s, false, 100); s.workers() != 2 || n > minSpell {
		t.Fatalf("after claims that did not queue: %d workers after %d claims, want 2 within %d", s.workers(), n, minSpell)
	}
	// A worker left out waits on raised: closed by the rise.
	s = newTurnShare(2)
	feed(s, 100, true)
	ch := s.raised()
	select {
	case <-ch:
		t.Fatal("raised closed before the count rose")
	default:
	}
	feed(s, 100, false)
	select {
	case <-ch:
	default:
		t.Fatal("raised not closed when the count rose")
	}
}

// TestTurnShareBacksOffFromSwinging: a turn that looks saturated with every
// worker and has room with half of them would swing between the two every
// few dozen claims; each short spell doubles the claims at the full count
// before the next halving, up to maxHoldoff, and a long spell resets it.
func TestTurnShareBacksOffFromSwinging(t *testing.T) {
	s := newTurnShare(2)
	var waits []int
	for range 9 {
		waits = append(waits, untilChange(t, s, true, 4*maxHoldoff))
		untilChange(t, s, false, 4*maxHoldoff) // room at one worker: back to two
	}
	// The first two: the average climbing to shedAt (from nothing, then
	// from below raiseAt), longer than the first holdoffs (minSpell, then
	// twice that); from then on the holdoff.
	if waits[0] != 44 || waits[1] > 2*shareSpan {
		t.Fatalf("claims before each halving: %v, want 44, then at most %d", waits, 2*shareSpan)
	}
	for i, want := range []int{32, 64, 128, 256, 512, 1024, 1024} {
		if waits[i+2] != want {
			t.Fatalf("claims before each halving: %v, want the holdoff doubling to %d", waits, maxHoldoff)
		}
	}
	// A long spell at one worker (saturated there too) resets it.
	untilChange(t, s, true, 4*maxHoldoff)
	feed(s, shortSpell, true)
	untilChange(t, s, false, 4*maxHoldoff)
	if n := untilChange(t, s, true, 4*maxHoldoff); n > 2*shareSpan {
		t.Fatalf("after a long spell the next halving took %d claims, want at most %d", n, 2*shareSpan)
	}
}

// TestOperationsQuotesTheLogLines: docs/operations.md tells an operator
// which log lines mean that the claim turn is saturated, and quotes them;
// a reworded message must not leave the guide quoting one the relay no
// longer writes.
func TestOperationsQuotesTheLogLines(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ") // quotes wrap across lines
	for _, line := range []string{LogFewerWorkers, LogMoreWorkers} {
		if !strings.Contains(text, "`"+line+"`") {
			t.Errorf("docs/operations.md does not quote the log line %q", line)
		}
	}
}
