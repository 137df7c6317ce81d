package amqp

import (
	"sync"
	"sync/atomic"
)

// alarm is one connection's resource alarm as the broker reports it:
// connection.blocked when a memory or disk alarm goes off (the broker stops
// reading what its publishers send), connection.unblocked when it clears.
// Until the first notification, asking costs an atomic load.
type alarm struct {
	on     atomic.Bool
	raised atomic.Uint64 // how many times it went off

	mu     sync.Mutex
	reason string
	// wake is closed, and replaced, at every change.
	wake chan struct{}
}

func newAlarm() *alarm { return &alarm{wake: make(chan struct{})} }

// set records a notification.
func (a *alarm) set(active bool, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if active {
		a.reason = reason
		a.raised.Add(1)
	}
	a.on.Store(active)
	close(a.wake)
	a.wake = make(chan struct{})
}

// active reports whether the broker blocks the connection now.
func (a *alarm) active() bool { return a.on.Load() }

// why is the broker's reason for the last block ("low on memory"), for
// messages only.
func (a *alarm) why() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reason
}

// changed is closed at the next notification.
func (a *alarm) changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wake
}
