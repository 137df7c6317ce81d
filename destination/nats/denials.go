package nats

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

func (d *Destination) deniedError(subject string) error {
	return fmt.Errorf("nats destination %q: publish to %q: %w: the server denies the relay's user publish on this subject (grant it, or route the topic elsewhere)",
		d.name, subject, nats.ErrPermissionViolation)
}

// denials records the subjects the server refused a publish to, as it
// reports them: asynchronously, in the connection's error handler. Until
// the first refusal, asking costs an atomic load: it is asked once per
// message.
type denials struct {
	// held is whether last holds anything (probe only ever holds
	// subjects of last): while not, every check answers at once without
	// the lock (the path of every publish on a connection with nothing
	// refused). Set with the map, under mu; a subject acknowledged again
	// clears its entries, and the fast path is back once none is left.
	held       atomic.Bool
	ackTimeout time.Duration // refusals older than this match no publish in flight
	mu         sync.Mutex
	last       map[string]time.Time // subject → the last refusal
	probe      map[string]time.Time // subject → when a publish went out to ask again
	// wake is closed, and replaced, at every refusal (under mu); read
	// without the lock by changed.
	wake atomic.Pointer[chan struct{}]
}

func newDenials(ackTimeout time.Duration) *denials {
	d := &denials{ackTimeout: ackTimeout, last: map[string]time.Time{}, probe: map[string]time.Time{}}
	wake := make(chan struct{})
	d.wake.Store(&wake)
	return d
}

// keep records whether last holds anything (the caller holds mu).
func (d *denials) keep() { d.held.Store(len(d.last) > 0) }

// maxDenied bounds the subjects remembered: a template subject can name
// many, and a refusal matters only to the publishes in flight. Past it,
// the oldest are forgotten: a refusal that a message still waiting for
// its ack needs is lost only when more than maxDenied subjects were
// refused within AckTimeout, and that message then fails when its ack
// times out, as before refusals were watched.
const maxDenied = 1024

func (d *denials) add(subject string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if _, known := d.last[subject]; !known && len(d.last) >= maxDenied {
		// Forget refusals older than any publish still waiting for its
		// ack (AckTimeout), then the oldest ones: never one a message
		// in flight may still need.
		for s, at := range d.last {
			if now.Sub(at) > d.ackTimeout {
				delete(d.last, s)
				delete(d.probe, s)
			}
		}
		for len(d.last) >= maxDenied {
			oldest, first := "", time.Time{}
			for s, at := range d.last {
				if first.IsZero() || at.Before(first) {
					oldest, first = s, at
				}
			}
			delete(d.last, oldest)
			delete(d.probe, oldest)
		}
	}
	d.last[subject] = now
	delete(d.probe, subject) // answered: refused again
	d.keep()                 // before the wake: a woken waiter sees the refusal
	next := make(chan struct{})
	close(*d.wake.Swap(&next))
}

// changed is closed at the next refusal.
func (d *denials) changed() <-chan struct{} { return *d.wake.Load() }

// recent reports whether a publish to subject was refused within
// AckTimeout, or a probe of it is out. Past AckTimeout it lets one publish
// through to ask the server again (the probe), answered by a refusal
// (add) or an ack (allowed), or given up after AckTimeout.
func (d *denials) recent(subject string) bool {
	if !d.held.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.last[subject]
	if !ok {
		return false
	}
	now := time.Now()
	if now.Sub(at) < d.ackTimeout {
		return true
	}
	if p, out := d.probe[subject]; out && now.Sub(p) < d.ackTimeout {
		return true
	}
	d.probe[subject] = now // subject is in last: held stays set
	return false
}

// allowed forgets the refusal of subject, whose publish was acknowledged.
func (d *denials) allowed(subject string) {
	if !d.held.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, subject)
	delete(d.probe, subject)
	d.keep()
}

// since reports whether a publish to subject was refused at or after t
// (a probe is not a refusal).
func (d *denials) since(subject string, t time.Time) bool {
	if !d.held.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.last[subject]
	return ok && !at.Before(t)
}

// publishDenied returns the subject of a publish permissions violation, as
// the server words it (Permissions Violation for Publish to "x"); nats.go
// parses the same text for subscriptions, having no other form of it.
func publishDenied(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	m := publishDeniedRe.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

var publishDeniedRe = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)
