package relay

import "time"

// The claim window (dialect.ClaimParams.Window) bounds what one claim
// reads: the window of windowSize sequence numbers from the first due
// pending row. Rows that cannot be claimed now fill a window: the later
// rows of a key whose head is in flight (under another relay's lease, or a
// dead relay's until it expires), waits out a backoff, or is held dead. A
// window full of them yields nothing, while ready rows wait behind it.
//
// sweep decides where each claim's window starts. From the front, as long
// as the front yields what is asked. When a window yields less while due
// rows lie past it (dialect.Claimed.More), the next claim starts where the
// claim said the next window begins (Claimed.Next), and so on past every
// window of blocked rows: the rows behind a stuck key wait for a few
// bounded claims, never for the key. Claims return to the front now and
// then (frontEvery, growing while the front stays blocked), and when the
// sweep reaches the end of the backlog.
//
// A window whose first unclaimed row belongs to a key this relay has in
// flight frees itself as this relay settles: the claimer waits for that
// instead of moving on (keys interleave: the windows past it hold the same
// keys' later rows). A sweep still finds nothing when the rows past the
// window are blocked too (the next rows of keys whose heads are all in
// flight with other relays).
// After maxBarren such claims in a row it stops and rests (restMin,
// doubling up to restMax; a sweep that finds rows halves the rest), so that
// a backlog with nothing ready costs a few windows per rest, not a walk at
// every claim.
type sweep struct {
	now func() time.Time

	from     int64     // where the next window starts; 0: the front
	frontAt  time.Time // past the front, the next claim returns to it from then on
	frontGap time.Duration
	barren   int       // claims past the front in a row that found nothing
	restAt   time.Time // no sweep before then
	rest     time.Duration
}

const (
	// windowFactor × BatchSize, and at least windowMin, is the window.
	windowFactor = 4
	windowMin    = 1000

	frontEveryMin = 250 * time.Millisecond
	frontEveryMax = 4 * time.Second
	maxBarren     = 2
	restMin       = 250 * time.Millisecond
	restMax       = 2 * time.Second
)

func newSweep() *sweep {
	return &sweep{now: time.Now, frontGap: frontEveryMin, rest: restMin}
}

// windowSize is the claim window for a batch size.
func windowSize(batch int) int { return max(windowFactor*batch, windowMin) }

// next returns where the next claim's window starts (0: the front).
func (s *sweep) next() int64 {
	if s.from != 0 && s.now().Before(s.frontAt) {
		return s.from
	}
	return 0
}

// blocker says what holds a window that yielded fewer rows than asked.
type blocker int

const (
	// blockedByNothing: no due row of the window is left unclaimed (or the
	// dialect does not say): the window is spent.
	blockedByNothing blocker = iota
	// blockedByMine: a key with a row in flight here, out for no longer
	// than usual. The window frees itself as this relay settles.
	blockedByMine
	// blockedByOther: a key with no row in flight here (held by another
	// relay, or one that died; waiting out a backoff; held dead), or one
	// whose row here is overdue (a slow receiver).
	blockedByOther
)

// claimed records a claim whose window started at from (0: the front) and
// took got of asked rows; more and next are what it said of the rows past
// its window, and by what holds its window. It reports whether the claimer
// should claim again at once (rows may be ready past the window) rather
// than wait for rows in flight to settle.
func (s *sweep) claimed(from int64, asked, got int, more bool, next int64, by blocker) (again bool) {
	now := s.now()
	atFront := from == 0
	switch {
	case got >= asked:
		// This window still has ready rows.
		if atFront {
			s.from, s.frontGap = 0, frontEveryMin // the front flows again
		}
		s.barren = 0
		return true
	case by == blockedByMine:
		// The next rows of this window are those of keys this relay is
		// delivering: they become heads as it settles. Keys interleave,
		// so the windows past it hold their later rows, no readier.
		s.barren = 0
		if atFront {
			s.from, s.frontGap = 0, frontEveryMin // the front is this relay's own
		}
		return false
	case !more:
		// Nothing due lies past this window: the backlog ends here; what
		// is left is at the front.
		s.from, s.barren = 0, 0
		return false
	case atFront:
		if now.Before(s.restAt) {
			return false
		}
		if s.from == 0 {
			s.from = next // start a sweep past the blocked front
		}
		s.frontAt = now.Add(s.frontGap)
		s.frontGap = min(2*s.frontGap, frontEveryMax)
		return true
	case got == 0:
		s.barren++
		if s.barren >= maxBarren {
			// Nothing ready past the front either: the rows in flight
			// elsewhere hold the keys. Rest before looking again.
			s.from, s.barren = 0, 0
			s.restAt = now.Add(s.rest)
			s.rest = min(2*s.rest, restMax)
			return false
		}
	default:
		s.barren, s.rest = 0, max(s.rest/2, restMin)
	}
	s.from = next
	return true
}
