package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
)

// fakePurger holds a number of purgeable rows per state.
type fakePurger struct {
	mu    sync.Mutex
	rows  map[string]int64
	calls []dialect.PurgeParams
}

func (f *fakePurger) Purge(_ context.Context, p dialect.PurgeParams) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, p)
	n := min(f.rows[p.State], int64(p.Limit))
	f.rows[p.State] -= n
	return n, nil
}

type countObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countObserver) Purged(state string, rows int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[state] += rows
}

func TestRetentionPassBatches(t *testing.T) {
	f := &fakePurger{rows: map[string]int64{"sent": 2500}}
	obs := &countObserver{n: map[string]int{}}
	n, err := RetentionPass(context.Background(), f, RetentionOptions{BatchSize: 1000, Pause: time.Millisecond, Observer: obs}, "sent", time.Hour)
	if err != nil || n != 2500 {
		t.Fatalf("pass = %d, %v", n, err)
	}
	if len(f.calls) != 3 {
		t.Fatalf("%d statements, want 3 (1000, 1000, 500)", len(f.calls))
	}
	for _, c := range f.calls {
		if c.Limit != 1000 || c.OlderThan != time.Hour || c.State != "sent" {
			t.Errorf("call %+v", c)
		}
	}
	if obs.n["sent"] != 2500 {
		t.Errorf("observed %v", obs.n)
	}
}

func TestRunRetentionStopsWithContext(t *testing.T) {
	f := &fakePurger{rows: map[string]int64{"sent": 10, "dead": 3}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		RunRetention(ctx, f, RetentionOptions{SentMaxAge: time.Hour, DeadMaxAge: 2 * time.Hour, Interval: time.Hour})
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		left := f.rows["sent"] + f.rows["dead"]
		f.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first pass did not purge within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunRetention did not return after cancel")
	}
}
