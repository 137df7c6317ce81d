package relay

import "time"

// Observer receives the engine's events, for metrics. Implementations must
// be safe for concurrent use and must not block.
type Observer interface {
	// Claimed reports one claim statement: rows claimed, the rows it asked
	// for (BatchSize, or the free budget when less), its duration and its
	// error.
	Claimed(rows, limit int, d time.Duration, err error)
	// ClaimedPastFront reports a claim whose window started past the front
	// of the table, because rows that cannot be claimed now filled the
	// windows before it (sweep.go), and the rows it claimed.
	ClaimedPastFront(rows int)
	// Published reports one publish to a destination: the rows sent
	// together, until the last of them was answered.
	Published(dest string, rows int, d time.Duration, err error)
	// DestinationLimit reports a destination's limit on rows in flight,
	// at start and whenever it adapts (limiter).
	DestinationLimit(dest string, limit int)
	// Backpressure reports a row the destination had no room for
	// (outbox.NoRoom), with the limit it named.
	Backpressure(dest, limit string)
	// Acked reports one row accepted by a destination, with the time from
	// the row's created_at to the acknowledgement; rows without a
	// created_at value are not reported.
	Acked(dest string, sinceCreated time.Duration)
	// Settled reports rows settled with an outcome (dest is empty for
	// released rows).
	Settled(dest string, o Outcome, rows int)
	// Wrote reports one settlement statement (complete, retry, dead,
	// release) and its duration.
	Wrote(op string, d time.Duration, err error)
	// Lost reports rows whose fenced write matched nothing.
	Lost(rows int)
	// Reclaimed reports rows whose expired lease was released.
	Reclaimed(rows int)
	// BreakerChanged reports a destination's circuit breaker entering a
	// new state.
	BreakerChanged(dest string, to BreakerState)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Claimed(int, int, time.Duration, error)      {}
func (NopObserver) ClaimedPastFront(int)                        {}
func (NopObserver) DestinationLimit(string, int)                {}
func (NopObserver) Backpressure(string, string)                 {}
func (NopObserver) Published(string, int, time.Duration, error) {}
func (NopObserver) Acked(string, time.Duration)                 {}
func (NopObserver) Settled(string, Outcome, int)                {}
func (NopObserver) Wrote(string, time.Duration, error)          {}
func (NopObserver) Lost(int)                                    {}
func (NopObserver) BreakerChanged(string, BreakerState)         {}
func (NopObserver) Reclaimed(int)                               {}
