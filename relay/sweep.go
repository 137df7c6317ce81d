package relay

import (
	"slices"
	"time"
)

// The claim window (dialect.ClaimParams.Window) bounds what one claim
// reads: windowSize sequence numbers from its start, the first due pending
// row. Rows that cannot be claimed now fill a window: the later rows of a
// key whose head is in flight (here, under another relay's lease, or a dead
// relay's until it expires), waits out a backoff, or is held dead. A
// window full of them yields nothing, while ready rows wait behind it.
//
// sweep decides where each claim's window starts. A claim that takes fewer
// rows than asked says what is left in its window: the keys of its first
// unclaimed rows (dialect.Claimed.Blockers).
//
//   - Some of them are keys this relay has in flight, not overdue: the
//     window yields again when they settle. The claimer waits for that.
//     (Keys interleave: the windows past it hold the same keys' later
//     rows, no readier.) But when these are all the window has left, and
//     fewer rows than the claim lacked, they go into the skip list until
//     they settle: a key at a slow receiver must not hold the window
//     until it is overdue.
//   - The others (another relay's keys, a dead relay's, a key waiting out a
//     backoff, held dead, or overdue here at a slow receiver) go into the
//     skip list (dialect.ClaimParams.Skip), and the next window starts at
//     the first row of another key: the rows behind a stuck key wait for a
//     claim or two, never for the key.
//   - Nothing left but rows of skipped keys: the window is spent, and the
//     next starts where the claim said (dialect.Claimed.Next).
//
// A skip list holds at most maxSkip keys, more than a relay holds in
// flight at the defaults, so that a dead relay's heads are all skipped
// (each skipped key costs every probe of a window a comparison); past
// that, the windows move on one after the other. Claims look at the true
// front again (no skip list) every frontEveryMin, less often while it
// stays blocked (up to frontEveryMax), and when the backlog past the
// window ends, so that a key that was blocked is noticed once it flows.
//
// Windows past the front find nothing when the keys there are all in
// flight with other relays. After maxBarren such claims in a row the
// claimer rests (restMin, doubling up to restMax; a claim that finds rows
// halves the rest) before it looks past the front again: a backlog with
// nothing ready costs a few windows per rest, not a walk at every claim.
//
// Windows move on (to Claimed.Next) only when what is left in them is
// skipped or blocked; a window holding rows of keys this relay is about to
// settle stays where it is. Rows that become heads behind a window that
// moved on are found from the front, which every look at it starts from.
type sweep struct {
	now func() time.Time

	from int64    // the lowest start of the next window; 0: the front
	skip []string // keys whose rows no window starts at
	// overdue are the keys of skip that were in flight here, overdue, when
	// they were added (a slow receiver): they leave the list once settled.
	overdue  map[string]bool
	frontAt  time.Time
	frontGap time.Duration
	barren   int // claims past the front in a row that found nothing
	restAt   time.Time
	rest     time.Duration
}

const (
	// windowFactor × BatchSize, and at least windowMin, is the window.
	windowFactor = 4
	windowMin    = 1000

	maxSkip       = 1024
	frontEveryMin = 250 * time.Millisecond
	frontEveryMax = time.Second
	maxBarren     = 2
	restMin       = 250 * time.Millisecond
	restMax       = 2 * time.Second
)

func newSweep() *sweep {
	return &sweep{now: time.Now, frontGap: frontEveryMin, rest: restMin}
}

// windowSize is the claim window for a batch size.
func windowSize(batch int) int { return max(windowFactor*batch, windowMin) }

// window is where a claim's window starts: at or after from (0: the front
// of the table), at a row of no key in skip.
type window struct {
	from int64
	skip []string
}

func (w window) front() bool { return w.from == 0 && len(w.skip) == 0 }

// next returns where the next claim's window starts.
func (s *sweep) next() window {
	now := s.now()
	if (s.from == 0 && len(s.skip) == 0) || !now.Before(s.frontAt) || now.Before(s.restAt) {
		return window{}
	}
	return window{from: s.from, skip: s.skip}
}

// blockers sorts what holds a window: the keys of its first unclaimed rows
// that this relay is about to settle (settling, soon), and the other keys,
// those of the skip list left out (others), of which overdue are in flight
// here but out for longer than usual. thin says that the window has fewer
// unclaimed rows left than the claim lacked: they are all named.
type blockers struct {
	soon    []string
	others  []string
	overdue []string
	thin    bool
}

// settling reports whether keys this relay is about to settle hold the
// window.
func (b blockers) settling() bool { return len(b.soon) > 0 }

// claimed records a claim at window w that took got of asked rows; start,
// more and next are what it said of its window and the rows past it (where
// it started; whether due rows lie past it, and where the first of them
// is), and by what holds it. It reports whether the claimer should claim
// again at once rather than wait for rows in flight to settle.
func (s *sweep) claimed(w window, asked, got int, start int64, more bool, next int64, by blockers) (again bool) {
	now := s.now()
	switch {
	case got >= asked:
		// This window still has ready rows.
		if w.front() {
			s.reset() // the front flows
		} else {
			s.from = start
		}
		s.barren = 0
		return true
	case w.front() && len(by.others) > 0 && !now.Before(s.restAt):
		// The front is held by keys this relay cannot settle soon: from
		// the front again, the skip list rebuilt (rows that became heads
		// behind the windows past it are found there), those keys skipped.
		s.skip, s.overdue = s.skip[:0], nil
		s.from = start
		s.frontAt = now.Add(s.frontGap)
		s.frontGap = min(2*s.frontGap, frontEveryMax)
		if !s.addSkip(by) {
			s.from = next // too many blocked keys to skip: move on
		}
		return true
	case !w.front() && s.addSkip(by):
		// Keys that block this window and no other yet: skip them too.
		s.from = start
		return true
	case by.settling() && by.thin && more:
		// What the window has left is a few rows of keys about to settle
		// here: waiting for them yields less than a batch, and keeps the
		// window's start on them while rows past it may be ready now (a
		// key at a slow receiver, not yet overdue). Skip those keys until
		// they settle (prune), as overdue ones.
		if w.front() {
			s.skip, s.overdue = s.skip[:0], nil
			s.frontAt = now.Add(s.frontGap)
		}
		s.from = start
		if !s.addSkip(blockers{others: by.soon, overdue: by.soon}) {
			s.from = next
		}
		s.barren = 0
		return true
	case by.settling():
		// Its next rows are heads once this relay settles the rows before.
		if w.front() {
			s.from, s.skip, s.overdue, s.frontGap = 0, nil, nil, frontEveryMin
		} else {
			s.from = start
		}
		s.barren = 0
		return false
	case !more:
		// Nothing due lies past this window (but rows of blocked keys):
		// what is left is at the front.
		s.reset()
		return false
	case w.front():
		if now.Before(s.restAt) {
			return false
		}
		s.from = next // the front window is spent
		s.frontAt = now.Add(s.frontGap)
		return true
	case got == 0 && len(by.others) > 0:
		s.barren++
		if s.barren >= maxBarren {
			// Nothing ready here either: other relays hold these keys.
			// Rest before looking again.
			s.from, s.barren = next, 0
			s.restAt = now.Add(s.rest)
			s.rest = min(2*s.rest, restMax)
			return false
		}
	default:
		s.barren, s.rest = 0, max(s.rest/2, restMin)
	}
	s.from = next // spent, or blocked past what the skip list holds
	return true
}

// addSkip adds the other keys of by to the skip list while it has room,
// and reports whether all of them are in it now and one at least was not
// before.
func (s *sweep) addSkip(by blockers) bool {
	added := false
	for _, k := range by.others {
		if slices.Contains(s.skip, k) {
			continue
		}
		if len(s.skip) >= maxSkip {
			return false
		}
		s.skip = append(s.skip, k)
		if slices.Contains(by.overdue, k) {
			if s.overdue == nil {
				s.overdue = map[string]bool{}
			}
			s.overdue[k] = true
		}
		added = true
	}
	return added
}

// prune drops from the skip list the keys that were overdue here and have
// settled since (settled reports that): their next rows are heads now.
func (s *sweep) prune(settled func(key string) bool) {
	if len(s.overdue) == 0 {
		return
	}
	s.skip = slices.DeleteFunc(s.skip, func(k string) bool {
		if s.overdue[k] && settled(k) {
			delete(s.overdue, k)
			return true
		}
		return false
	})
}

// reset returns claims to the true front, and forgets any rest: what made
// claims past the front barren is over.
func (s *sweep) reset() {
	s.from, s.skip, s.overdue, s.frontGap = 0, nil, nil, frontEveryMin
	s.barren, s.rest, s.restAt = 0, restMin, time.Time{}
}
