package dialecttest

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// testClaimWindow: a windowed claim considers only rows within Window
// sequence numbers of the first due pending row, keeps every readiness
// rule inside the window, and never returns more than an unbounded claim
// would. A dialect that ignores Window passes as long as its answer is a
// superset (it must still never return a non-head).
func testClaimWindow(t *testing.T, h Harness) {
	ctx := testContext(t)
	var rows []Row
	for i := 0; i < 20; i++ {
		rows = append(rows, Row{Topic: "window.deep", Key: "deep"}) // one deep key first
	}
	rows = append(rows, Row{Topic: "window.late", Key: "late-1"}, Row{Topic: "window.late", Key: "late-2"})
	ids := insert(t, ctx, h, rows...)

	tok := newToken()
	msgs, err := h.Dialect().Claim(ctx, dialect.ClaimParams{Token: tok, Limit: 10, Lease: time.Minute, Window: 5})
	if err != nil {
		t.Fatalf("windowed claim: %v", err)
	}
	if len(msgs) == 0 || msgs[0].ID != ids[0] {
		t.Fatalf("windowed claim returned %d rows, want the deep key's head first", len(msgs))
	}
	for _, m := range msgs {
		if m.Key == "deep" && m.ID != ids[0] {
			t.Fatalf("windowed claim returned a non-head row of key deep: %s", m.ID)
		}
	}
	bounded := len(msgs) == 1 // a dialect that honours the window stops at the deep key's head

	// With the deep head in flight, the window holds only its later rows:
	// nothing there is ready. The unbounded claim finds the late heads.
	msgs, err = h.Dialect().Claim(ctx, dialect.ClaimParams{Token: newToken(), Limit: 10, Lease: time.Minute, Window: 5})
	if err != nil {
		t.Fatalf("windowed claim: %v", err)
	}
	if bounded && len(msgs) != 0 {
		t.Fatalf("windowed claim behind an in-flight deep key returned %d rows, want 0", len(msgs))
	}
	for _, m := range msgs {
		if m.Key == "deep" {
			t.Fatalf("a claim returned row %s of key deep while its head is in flight", m.ID)
		}
	}
	if !bounded {
		return
	}
	msgs = claim(t, ctx, h, newToken(), 10, time.Minute)
	if len(msgs) != 2 || msgs[0].Key != "late-1" || msgs[1].Key != "late-2" {
		t.Fatalf("unbounded claim returned %d rows, want the two late heads", len(msgs))
	}
}

// testInFlight: InFlight (dialect.InFlightReporter) reports a row held
// under an unexpired lease, and nothing once every lease has ended: by
// completion, by release, or by expiry on the database clock. The engine
// skips its unbounded claim while it reports true (relay/claim.go), so a
// false true would delay rows behind the window and a false false would
// cost a walk of the backlog.
func testInFlight(t *testing.T, h Harness) {
	ctx := testContext(t)
	r, ok := h.Dialect().(dialect.InFlightReporter)
	if !ok {
		t.Fatalf("%T does not implement dialect.InFlightReporter", h.Dialect())
	}
	inFlight := func() bool {
		t.Helper()
		busy, err := r.InFlight(ctx)
		if err != nil {
			t.Fatalf("InFlight: %v", err)
		}
		return busy
	}
	if inFlight() {
		t.Fatal("InFlight reports a batch on an empty table")
	}
	insert(t, ctx, h, Row{Key: "a"}, Row{Key: "b"}, Row{})
	if inFlight() {
		t.Fatal("InFlight reports a batch when every row is pending")
	}

	// Completed: nothing held.
	tok := newToken()
	msgs := claim(t, ctx, h, tok, 1, longLease)
	if !inFlight() {
		t.Fatal("InFlight reports nothing while a row is claimed under a live lease")
	}
	n, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: tok, IDs: idsOf(msgs)})
	wantAffected(t, "complete", n, err, 1)
	if inFlight() {
		t.Fatal("InFlight reports a batch after its only row was completed")
	}

	// Released: nothing held.
	tok = newToken()
	msgs = claim(t, ctx, h, tok, 1, longLease)
	n, err = h.Dialect().Release(ctx, dialect.ReleaseParams{Token: tok, IDs: idsOf(msgs)})
	wantAffected(t, "release", n, err, 1)
	if inFlight() {
		t.Fatal("InFlight reports a batch after its only row was released")
	}

	// Expired on the database clock: still processing, no longer held.
	msgs = claim(t, ctx, h, newToken(), 1, longLease)
	if !inFlight() {
		t.Fatal("InFlight reports nothing while a row is claimed under a live lease")
	}
	if err := h.ExpireLease(ctx, msgs[0].ID); err != nil {
		t.Fatalf("expire lease: %v", err)
	}
	if got := row(t, ctx, h, msgs[0].ID); got.State != outbox.StateProcessing {
		t.Fatalf("row %s is %s after its lease expired, want still processing (nothing reaped it)", msgs[0].ID, got.State)
	}
	if inFlight() {
		t.Fatal("InFlight counts a processing row whose lease has expired")
	}
}
