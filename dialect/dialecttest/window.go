package dialecttest

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
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
