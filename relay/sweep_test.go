package relay

import (
	"testing"
	"time"
)

// TestSweepLooksPastABlockedFront: claims stay at the front while it yields
// what they ask; a short claim with due rows past its window moves the
// next claim there, and on along the windows, until the backlog ends; then
// claims return to the front.
func TestSweepLooksPastABlockedFront(t *testing.T) {
	now := time.Unix(0, 0)
	s := newSweep()
	s.now = func() time.Time { return now }
	if !s.claimed(0, 100, 100, true, 5000, blockedByNothing) || s.next() != 0 {
		t.Fatal("a full claim at the front must stay at the front and claim again")
	}
	if !s.claimed(0, 100, 3, true, 5000, blockedByOther) || s.next() != 5000 {
		t.Fatalf("a short front claim with rows past its window: next from %d, want 5000", s.next())
	}
	if !s.claimed(5000, 100, 100, true, 9000, blockedByOther) || s.next() != 5000 {
		t.Fatalf("a full claim past the front stays in its window; next from %d", s.next())
	}
	if !s.claimed(5000, 100, 40, true, 9000, blockedByNothing) || s.next() != 9000 {
		t.Fatalf("an exhausted window moves on; next from %d, want 9000", s.next())
	}
	if !s.claimed(9000, 100, 10, true, 13000, blockedByOther) || s.next() != 13000 {
		t.Fatalf("a window blocked by another key moves on; next from %d, want 13000", s.next())
	}
	if s.claimed(13000, 100, 10, true, 17000, blockedByMine) || s.next() != 13000 {
		t.Fatalf("a window blocked by this relay's keys waits there; next from %d, want 13000", s.next())
	}
}

// TestSweepReturnsToTheFront: past the front, claims look at the front
// again after frontEveryMin, less often while it stays blocked (up to
// frontEveryMax), and stay there once it flows again.
func TestSweepReturnsToTheFront(t *testing.T) {
	now := time.Unix(0, 0)
	s := newSweep()
	s.now = func() time.Time { return now }
	s.claimed(0, 100, 0, true, 5000, blockedByOther)
	var gaps []time.Duration
	for range 6 {
		start := now
		for s.next() != 0 {
			s.claimed(5000, 100, 100, true, 9000, blockedByOther) // rows keep coming past the front
			now = now.Add(10 * time.Millisecond)
		}
		gaps = append(gaps, now.Sub(start))
		s.claimed(0, 100, 0, true, 5000, blockedByOther) // the front is still blocked
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if gaps[i] != want[i] {
			t.Fatalf("gaps between front claims %v, want %v", gaps, want)
		}
	}
	now = now.Add(5 * time.Second)
	if s.next() != 0 {
		t.Fatal("no front claim after the gap")
	}
	s.claimed(0, 100, 100, true, 5000, blockedByOther) // the front flows again
	if s.next() != 0 || s.frontGap != frontEveryMin {
		t.Fatalf("after a full front claim: next from %d, gap %v; want the front and the gap reset", s.next(), s.frontGap)
	}
}

// TestSweepRestsWhenNothingPastTheFrontIsReady: with every key's head in
// flight, claims past the front find nothing; after maxBarren of them the
// sweep stops and rests, twice as long each time, so a backlog with
// nothing ready costs a few windows per rest; a claim that finds rows
// resets the rest.
func TestSweepRestsWhenNothingPastTheFrontIsReady(t *testing.T) {
	now := time.Unix(0, 0)
	s := newSweep()
	s.now = func() time.Time { return now }
	barrenSweep := func() (claims int) {
		if !s.claimed(0, 100, 0, true, 5000, blockedByOther) {
			return 0
		}
		for claims = 1; s.claimed(s.next(), 100, 0, true, s.next()+5000, blockedByOther); claims++ {
		}
		return claims
	}
	if n := barrenSweep(); n != maxBarren {
		t.Fatalf("a barren sweep ran %d claims, want %d", n, maxBarren)
	}
	if s.claimed(0, 100, 0, true, 5000, blockedByOther) {
		t.Fatal("a short front claim during the rest started a sweep")
	}
	now = now.Add(restMin)
	if n := barrenSweep(); n != maxBarren || s.rest != 4*restMin {
		t.Fatalf("second barren sweep: %d claims, next rest %v; want %d and %v", n, s.rest, maxBarren, 4*restMin)
	}
	now = now.Add(2 * restMin)
	s.claimed(0, 100, 0, true, 5000, blockedByOther)
	s.claimed(5000, 100, 30, true, 9000, blockedByOther) // rows past the front after all
	if s.rest != 2*restMin {
		t.Fatalf("rest after a sweep that found rows is %v, want it halved to %v", s.rest, 2*restMin)
	}
	for range 10 {
		now = now.Add(restMax)
		barrenSweep()
	}
	if s.rest != restMax {
		t.Fatalf("rest after many barren sweeps is %v, want the cap %v", s.rest, restMax)
	}
}

// TestSweepWaitsForItsOwnKeys: a short front claim whose window is held by
// a key this relay has in flight starts no sweep (the window frees itself
// as this relay settles); one held by another key does; the end of the
// backlog waits too.
func TestSweepWaitsForItsOwnKeys(t *testing.T) {
	s := newSweep()
	if s.claimed(0, 100, 10, true, 5000, blockedByMine) || s.next() != 0 {
		t.Fatal("a front blocked by this relay's own key started a sweep")
	}
	if s.claimed(0, 100, 10, false, 0, blockedByNothing) || s.next() != 0 {
		t.Fatal("a front with nothing past it started a sweep")
	}
	if !s.claimed(0, 100, 10, true, 5000, blockedByOther) || s.next() != 5000 {
		t.Fatal("a front blocked by another key started no sweep")
	}
}
