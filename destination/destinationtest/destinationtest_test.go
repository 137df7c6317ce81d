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
}

func newMemory(addr string) *memory {
	m := &memory{addr: addr}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (d *memory) Publish(ctx context.Context, msgs []outbox.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("memory: closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		switch m.Headers["poison"] {
		case "permanent":
			errs[i] = outbox.Permanent(errors.New("poisoned"))
			continue
		case "retryable":
			errs[i] = errors.New("poisoned")
			continue
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
	}
	d.cond.Broadcast()
	return destination.NewBatchError(errs)
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
		}
	}, destinationtest.Features{KeyHeader: true, KeyPreserved: true, OrderedPerKey: true, FailureInjection: true, PermanentInjection: true})
}
