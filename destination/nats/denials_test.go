package nats

import (
	"testing"
	"time"
)

// TestDenialsProbeOnceAfterTheWindow: within AckTimeout of a refusal a
// subject is refused without a publish; past it, exactly one publish goes
// out to ask the server again (the check before the window slot and the
// check after it must not refuse that probe: before, the probe marked the
// subject refused and the second check failed it, so a subject once
// refused was never published to again). Until the probe is answered the
// others wait; an ack clears the refusal, another refusal restarts it.
func TestDenialsProbeOnceAfterTheWindow(t *testing.T) {
	const window = 40 * time.Millisecond
	d := newDenials(window)
	d.add("s")
	if !d.recent("s") || d.recent("other") {
		t.Fatal("a subject refused just now is not refused, or another one is")
	}
	time.Sleep(window + 10*time.Millisecond)
	waited := time.Now()
	if d.recent("s") {
		t.Fatal("past the window, no probe is let through")
	}
	if d.since("s", waited) {
		t.Fatal("the probe was taken for a refusal by the check after the window slot")
	}
	if !d.recent("s") {
		t.Fatal("a second publish went out while the probe was unanswered")
	}
	d.allowed("s")
	if d.held.Load() {
		t.Fatal("with every refusal acknowledged, the checks still take the lock (no fast path)")
	}
	if d.recent("s") {
		t.Fatal("an acknowledged probe did not clear the refusal")
	}
	woken := d.changed()
	d.add("s")
	select {
	case <-woken:
	default:
		t.Fatal("a refusal did not close the channel of changed")
	}
	if !d.recent("s") {
		t.Fatal("a refusal after the ack is not refused")
	}
}
