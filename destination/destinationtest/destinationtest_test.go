package destinationtest_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/outbox"
)

// memory is an in-memory destination that proves the suite accepts a
// correct adapter.
type memory struct {
	mu     sync.Mutex
	cond   *sync.Cond
	got    []destinationtest.Received
	read   int
	closed bool
	addr   string
	slow   map[string]chan struct{}
}

func newMemory(addr string) *memory {
	m := &memory{addr: addr, slow: map[string]chan struct{}{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (d *memory) Publish(ctx context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	d.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}

// PublishEach takes each message at once, except one marked slow, which
// is taken when its release channel closes.
func (d *memory) PublishEach(ctx context.Context, msgs []outbox.Message, done func(int, error)) {
	var wg sync.WaitGroup
	for i := range msgs {
		m := msgs[i]
		if slow := d.slowChan(m.Headers["slow"]); slow != nil {
			wg.Go(func() {
				select {
				case <-slow:
					done(i, d.take(ctx, m))
				case <-ctx.Done():
					done(i, ctx.Err())
				}
			})
			continue
		}
		done(i, d.take(ctx, m))
	}
	wg.Wait()
}

func (d *memory) slowChan(token string) chan struct{} {
	if token == "" {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.slow[token]
}

func (d *memory) take(ctx context.Context, m outbox.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("memory: closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch m.Headers["poison"] {
	case "permanent":
		return outbox.Permanent(errors.New("poisoned"))
	case "retryable":
		return errors.New("poisoned")
	}
	h := map[string]string{}
	for k, v := range m.Headers {
		h[k] = v
	}
	h["X-Topic"] = m.Topic
	h["X-Attempt"] = strconv.Itoa(m.Attempt)
	if m.Key != "" {
		h["X-Message-Key"] = m.Key
	} else {
		delete(h, "X-Message-Key")
	}
	d.got = append(d.got, destinationtest.Received{ID: m.ID, Address: d.addr, Key: m.Key, Headers: h, Body: m.Payload})
	d.cond.Broadcast()
	return nil
}

// hold marks m slow: it is taken when the returned release is called.
func (d *memory) hold(m *outbox.Message) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan struct{})
	d.slow[m.ID] = ch
	m.Headers["slow"] = m.ID
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (d *memory) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

func (d *memory) receive(ctx context.Context, n int) ([]destinationtest.Received, error) {
	stop := context.AfterFunc(ctx, func() { d.mu.Lock(); d.cond.Broadcast(); d.mu.Unlock() })
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.got)-d.read < n && ctx.Err() == nil {
		d.cond.Wait()
	}
	end := min(d.read+n, len(d.got))
	out := append([]destinationtest.Received(nil), d.got[d.read:end]...)
	d.read = end
	if len(out) < n {
		return out, ctx.Err()
	}
	return out, nil
}

func TestRunAgainstMemory(t *testing.T) {
	destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
		d := newMemory("mem.orders")
		return destinationtest.Harness{
			Destination: d,
			Topic:       "orders",
			Address:     "mem.orders",
			Receive:     d.receive,
			Poison: func(m *outbox.Message, permanent bool) {
				if permanent {
					m.Headers["poison"] = "permanent"
				} else {
					m.Headers["poison"] = "retryable"
				}
			},
			Slow: d.hold,
		}
	}, destinationtest.Features{KeyHeader: true, KeyPreserved: true, OrderedPerKey: true, FailureInjection: true, PermanentInjection: true,
		Streamer: true, SlowInjection: true})
}

var _ destination.Streamer = (*memory)(nil)
