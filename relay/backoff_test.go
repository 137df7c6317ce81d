package relay

import (
	"testing"
	"time"
)

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 60 * time.Second}
	b.setDefaults()
	want := []int{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for attempt, w := range want {
		if got := b.Delay(attempt); got != time.Duration(w)*time.Second {
			t.Errorf("Delay(%d) = %v, want %ds", attempt, got, w)
		}
	}
	// Far past the cap, and past the point where the shift overflows.
	for _, attempt := range []int{40, 62, 63, 64, 1000} {
		if got := b.Delay(attempt); got != 60*time.Second {
			t.Errorf("Delay(%d) = %v, want the cap 60s", attempt, got)
		}
	}
}

func TestBackoffJitterStaysInBand(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute, Jitter: 0.25}
	b.setDefaults()
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := b.Delay(2) // 4s ± 25%
		if d < 3*time.Second || d > 5*time.Second {
			t.Fatalf("Delay(2) = %v, outside 4s ± 25%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("jitter produced only %d distinct delays in 1000 draws", len(seen))
	}
	for range 1000 {
		if d := b.Delay(30); d > time.Minute {
			t.Fatalf("jittered delay %v above the cap", d)
		}
	}
}

func TestIdleWaitBacksOffAfterAQuietSecond(t *testing.T) {
	e := &Engine{opt: Options{PollInterval: 100 * time.Millisecond, MaxPollInterval: time.Second}}
	for empty := 1; empty <= 10; empty++ {
		if d := e.idleWait(empty); d != 100*time.Millisecond {
			t.Fatalf("idleWait(%d) = %v, want the poll interval during the first quiet second", empty, d)
		}
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		if d := e.idleWait(11 + i); d != w {
			t.Fatalf("idleWait(%d) = %v, want %v", 11+i, d, w)
		}
	}
	// MaxPollInterval = PollInterval disables the backoff.
	e.opt.MaxPollInterval = e.opt.PollInterval
	if d := e.idleWait(1000); d != 100*time.Millisecond {
		t.Fatalf("idleWait(1000) with MaxPollInterval = PollInterval: %v, want the poll interval", d)
	}
}
