package relay

import (
	"math/rand/v2"
	"time"
)

// Backoff is the retry schedule: Base × 2^attempt, spread by ±Jitter (a
// fraction of the delay), capped at Max.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

func (b *Backoff) setDefaults() {
	if b.Base <= 0 {
		b.Base = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Minute
	}
	if b.Max < b.Base {
		b.Max = b.Base
	}
	b.Jitter = min(max(b.Jitter, 0), 1)
}

// Delay returns the wait before the retry that follows a failure at
// attempt (0 for the first delivery). The result is never above Max.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Max
	if attempt < 62 {
		if x := b.Base << attempt; x > 0 && x < b.Max && x>>attempt == b.Base {
			d = x
		}
	}
	if b.Jitter > 0 {
		spread := float64(d) * b.Jitter
		d = time.Duration(float64(d) - spread + rand.Float64()*2*spread)
	}
	return min(max(d, 0), b.Max)
}
