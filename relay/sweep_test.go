package relay

import (
	"slices"
	"testing"
	"time"
)

func newTestSweep() (*sweep, *time.Time) {
	now := time.Unix(0, 0)
	s := newSweep()
	s.now = func() time.Time { return now }
	return s, &now
}

var (
	nothing     = blockers{}
	ownSettling = blockers{soon: []string{"own"}}
)

func others(keys ...string) blockers { return blockers{others: keys} }

// TestSweepSkipsTheKeysThatBlockTheFront: claims stay at the front while it
// yields what they ask; a short front claim whose window is held by keys
// this relay is not about to settle skips them: the next window starts at a
// row of another key. Keys that block later windows join the list.
func TestSweepSkipsTheKeysThatBlockTheFront(t *testing.T) {
	s, _ := newTestSweep()
	if !s.claimed(window{}, 100, 100, 10, true, 1010, nothing) || !s.next().front() {
		t.Fatal("a full claim at the front must stay at the front and claim again")
	}
	if !s.claimed(window{}, 100, 3, 10, true, 1010, others("stuck")) {
		t.Fatal("a front held by another key must be looked past at once")
	}
	w := s.next()
	if w.from != 10 || !slices.Equal(w.skip, []string{"stuck"}) {
		t.Fatalf("next window %+v, want from the front's start with the stuck key skipped", w)
	}
	if !s.claimed(w, 100, 100, 1200, true, 2200, nothing) || s.next().from != 1200 {
		t.Fatalf("a full claim past the front stays at its window; next %+v", s.next())
	}
	if !s.claimed(s.next(), 100, 20, 1200, true, 2200, others("backoff")) || !slices.Equal(s.next().skip, []string{"stuck", "backoff"}) {
		t.Fatalf("a second blocked key joins the skip list; next %+v", s.next())
	}
	if !s.claimed(s.next(), 100, 20, 1200, true, 2200, nothing) || s.next().from != 2200 {
		t.Fatalf("a spent window moves on to the next; next %+v", s.next())
	}
	if s.claimed(s.next(), 100, 10, 2200, false, 0, nothing) || !s.next().front() {
		t.Fatal("the end of the backlog returns to the front and waits")
	}
}

// TestSweepWaitsForItsOwnKeys: a short claim whose window is held by keys
// this relay is about to settle waits for that, at the front and past it;
// the window past the front stays where it is.
func TestSweepWaitsForItsOwnKeys(t *testing.T) {
	s, _ := newTestSweep()
	if s.claimed(window{}, 100, 10, 10, true, 1010, ownSettling) || !s.next().front() {
		t.Fatal("a front held by this relay's own keys started a sweep")
	}
	s.claimed(window{}, 100, 0, 10, true, 1010, others("stuck"))
	w := s.next()
	if s.claimed(w, 100, 5, 500, true, 1500, ownSettling) || s.next().from != 500 || len(s.next().skip) != 1 {
		t.Fatalf("a window past the front held by this relay's keys: next %+v, want it kept", s.next())
	}
}

// TestSweepLooksPastAThinWindowOfItsOwnKeys: when all a window has left is
// a few rows of keys about to settle here, fewer than the claim lacked, and
// rows lie past it, those keys are skipped until they settle: a key at a
// slow receiver, not yet overdue, must not hold the window meanwhile.
func TestSweepLooksPastAThinWindowOfItsOwnKeys(t *testing.T) {
	s, _ := newTestSweep()
	thin := blockers{soon: []string{"slow"}, thin: true}
	if !s.claimed(window{}, 100, 0, 10, true, 1010, thin) {
		t.Fatal("a front window left with one row of a settling key waited for it")
	}
	w := s.next()
	if w.from != 10 || !slices.Equal(w.skip, []string{"slow"}) {
		t.Fatalf("next window %+v, want from the front's start with the settling key skipped", w)
	}
	s.prune(func(string) bool { return false })
	if !slices.Equal(s.next().skip, []string{"slow"}) {
		t.Fatal("the key left the skip list before it settled")
	}
	s.prune(func(k string) bool { return k == "slow" })
	if len(s.next().skip) != 0 {
		t.Fatalf("skip list %q after the key settled, want it empty", s.next().skip)
	}
	if s.claimed(window{}, 100, 0, 10, false, 0, thin) {
		t.Fatal("with nothing past the window, a window of settling keys must wait for them")
	}
	if s.claimed(window{}, 100, 0, 10, true, 1010, ownSettling) || !s.next().front() {
		t.Fatal("a window with more rows of settling keys than the claim lacked must wait for them")
	}
}

// TestSweepReturnsToTheFront: past the front, claims look at the true front
// (no skip list) again after frontEveryMin, less often while it stays
// blocked (up to frontEveryMax), and stay there once it flows again.
func TestSweepReturnsToTheFront(t *testing.T) {
	s, now := newTestSweep()
	s.claimed(window{}, 100, 0, 10, true, 1010, others("stuck"))
	var gaps []time.Duration
	for range 5 {
		start := *now
		for !s.next().front() {
			s.claimed(s.next(), 100, 100, 500, true, 1500, nothing) // rows keep coming past the front
			*now = now.Add(10 * time.Millisecond)
		}
		gaps = append(gaps, now.Sub(start))
		s.claimed(window{}, 100, 0, 10, true, 1010, others("stuck")) // the front is still blocked
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second, time.Second}
	if !slices.Equal(gaps, want) {
		t.Fatalf("gaps between front claims %v, want %v", gaps, want)
	}
	*now = now.Add(2 * time.Second)
	s.claimed(window{}, 100, 100, 10, true, 1010, nothing) // the front flows again
	if !s.next().front() || s.frontGap != frontEveryMin || s.skip != nil {
		t.Fatalf("after a full front claim: next %+v, gap %v; want the front, the gap and the skip list reset", s.next(), s.frontGap)
	}
}

// TestSweepRestsWhenNothingPastTheFrontIsReady: with every key's head in
// flight with other relays, windows past the front find nothing. When the
// skip list cannot take their keys, after maxBarren such claims the claimer
// rests, twice as long each time up to restMax, then looks from the front
// again; a claim that finds rows halves the rest.
func TestSweepRestsWhenNothingPastTheFrontIsReady(t *testing.T) {
	s, now := newTestSweep()
	full := make([]string, maxSkip)
	for i := range full {
		full[i] = string(rune('a' + i))
	}
	s.claimed(window{}, 100, 0, 10, true, 1010, others(full...)) // the skip list is full
	next := int64(1010)
	barren := func() (claims int) {
		for claims = 0; claims < 10; claims++ {
			w := s.next()
			if w.front() {
				return claims
			}
			next += 1000
			if !s.claimed(w, 100, 0, w.from, true, next, others("other-relay")) {
				return claims + 1
			}
		}
		return claims
	}
	if n := barren(); n != maxBarren {
		t.Fatalf("a barren walk ran %d claims, want %d", n, maxBarren)
	}
	if !s.next().front() || s.claimed(window{}, 100, 0, 10, true, 1010, others("x")) {
		t.Fatal("a short front claim during the rest looked past the front")
	}
	*now = now.Add(restMin)
	if !s.next().front() || !s.claimed(window{}, 100, 0, 10, true, 1010, others(full...)) {
		t.Fatal("after the rest, the front (still blocked) was not looked past")
	}
	if w := s.next(); w.from != 10 || len(w.skip) != maxSkip {
		t.Fatalf("after the rest claims go to %+v, want the front's start with its blocked keys skipped", w)
	}
	barren()
	if s.rest != 4*restMin {
		t.Fatalf("after the second barren walk the next rest is %v; want %v", s.rest, 4*restMin)
	}
	*now = now.Add(4 * restMin)
	s.claimed(window{}, 100, 0, 10, true, 1010, others(full...)) // the front, still blocked
	if w := s.next(); w.front() {
		t.Fatal("after the rest, the front (still blocked) was not looked past")
	}
	s.claimed(s.next(), 100, 30, s.from, true, next+1000, others("other-relay")) // rows after all
	if s.rest != 2*restMin {
		t.Fatalf("rest after a claim that found rows is %v, want it halved to %v", s.rest, 2*restMin)
	}
	for range 10 {
		*now = now.Add(restMax)
		s.claimed(window{}, 100, 0, 10, true, 1010, others(full...))
		barren()
	}
	if s.rest != restMax {
		t.Fatalf("rest after many barren walks is %v, want the cap %v", s.rest, restMax)
	}
}

// TestSweepForgetsOverdueKeysOnceSettled: a key in flight here but overdue
// (a slow receiver) is skipped like another relay's, and leaves the skip
// list once its row settles: its next rows are heads then. Another relay's
// key stays.
func TestSweepForgetsOverdueKeysOnceSettled(t *testing.T) {
	s, _ := newTestSweep()
	s.claimed(window{}, 100, 0, 10, true, 1010, blockers{others: []string{"slow", "dead"}, overdue: []string{"slow"}})
	if !slices.Equal(s.next().skip, []string{"slow", "dead"}) {
		t.Fatalf("skip list %v, want both keys", s.next().skip)
	}
	s.prune(func(k string) bool { return k == "slow" || k == "dead" })
	if !slices.Equal(s.next().skip, []string{"dead"}) {
		t.Fatalf("skip list after the slow key settled %v, want only the other relay's key", s.next().skip)
	}
}
