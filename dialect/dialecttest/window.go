package dialecttest

import (
	"context"
	"fmt"
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

// testClaimSweep: a window whose rows cannot be claimed now does not keep
// the rows behind it waiting. The front of the table holds, in this order,
// a key whose head is in flight (a relay that died holding it, say) and a
// key whose head waits out a backoff, each with later rows that are due;
// then ready heads of other keys and an unkeyed row.
// A windowed claim from the front finds nothing and says where the next
// window starts; a claim from there takes the ready heads, in sequence
// order, and never a row of the blocked keys. Only for dialects that
// implement dialect.Sweeper.
func testClaimSweep(t *testing.T, h Harness) {
	sw, ok := h.Dialect().(dialect.Sweeper)
	if !ok {
		t.Skip("the dialect has no windowed claim (dialect.Sweeper)")
	}
	ctx := testContext(t)
	const window = 8
	var tokens []string
	claimNext := func(p dialect.ClaimParams) (dialect.Claimed, error) {
		p.Token = newToken()
		c, err := sw.ClaimNext(ctx, p)
		if len(c.Messages) > 0 {
			tokens = append(tokens, p.Token)
		}
		return c, err
	}
	if bc, ok := h.Dialect().(dialect.BatchCommitter); ok {
		t.Cleanup(func() { // lock mode: end the batches' transactions
			for _, tok := range tokens {
				_ = bc.Commit(context.Background(), tok)
			}
		})
	}
	var rows []Row
	for range 6 {
		rows = append(rows, Row{Topic: "sweep.stuck", Key: "stuck"})
	}
	rows = append(rows, Row{Topic: "sweep.backoff", Key: "backoff", Delay: time.Hour})
	for range 6 {
		rows = append(rows, Row{Topic: "sweep.backoff", Key: "backoff"})
	}
	for i := range 5 {
		rows = append(rows, Row{Topic: "sweep.ready", Key: fmt.Sprintf("ready-%d", i)})
	}
	rows = append(rows, Row{Topic: "sweep.unkeyed"})
	ids := insert(t, ctx, h, rows...)

	// The stuck key's head goes in flight under a long lease.
	held, err := claimNext(dialect.ClaimParams{Limit: 1, Lease: longLease, Window: window})
	if err != nil || len(held.Messages) != 1 || held.Messages[0].ID != ids[0] {
		t.Fatalf("claim of the stuck head: %v, %v", held.Messages, err)
	}

	front, err := claimNext(dialect.ClaimParams{Limit: 10, Lease: longLease, Window: window})
	if err != nil {
		t.Fatalf("windowed claim from the front: %v", err)
	}
	for _, m := range front.Messages {
		if m.Key == "stuck" || m.Key == "backoff" {
			t.Fatalf("a claim returned row %s of blocked key %q", m.ID, m.Key)
		}
	}
	if len(front.Messages) != 0 {
		t.Fatalf("the front window (%d rows of blocked keys) yielded %v, want nothing", window, idsOf(front.Messages))
	}
	if !front.More {
		t.Fatal("the front window yielded nothing and says no due row lies past it, but five ready heads do")
	}
	_, lockMode := h.Dialect().(dialect.BatchCommitter)
	if (len(front.Blockers) == 0 || front.Blockers[0] != "stuck") && (!lockMode || len(front.Blockers) != 0) {
		t.Fatalf("the front window's blockers are %q, want the stuck key first (lock mode may not know them)", front.Blockers)
	}

	// From where the front claim said the next window starts: the rows
	// there that are heads, never a row of a blocked key.
	past, err := claimNext(dialect.ClaimParams{Limit: 10, Lease: longLease, Window: window, From: front.Next})
	if err != nil {
		t.Fatalf("windowed claim from %d: %v", front.Next, err)
	}
	var got []string
	for _, m := range past.Messages {
		if m.Key == "stuck" || m.Key == "backoff" {
			t.Fatalf("claim from %d returned row %s of blocked key %q", front.Next, m.ID, m.Key)
		}
		got = append(got, m.ID)
	}
	if len(got) == 0 || past.Start < front.Next {
		t.Fatalf("claim from %d took %v, its window starting at %d; want ready heads from a window at or past it", front.Next, got, past.Start)
	}
	// Told which keys block the front (dialect.ClaimParams.Skip), a claim's
	// window starts at the first row of another key: the rest of the ready
	// rows, whatever lies before them.
	skipping, err := claimNext(dialect.ClaimParams{Limit: 10, Lease: longLease, Window: window, Skip: []string{"stuck", "backoff"}})
	if err != nil {
		t.Fatalf("windowed claim skipping the blocked keys: %v", err)
	}
	for _, m := range skipping.Messages {
		if m.Key == "stuck" || m.Key == "backoff" {
			t.Fatalf("claim skipping the blocked keys returned row %s of key %q", m.ID, m.Key)
		}
		got = append(got, m.ID)
	}
	if want := ids[13:]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claims past the blocked front took %v, want the ready heads and the unkeyed row %v in sequence order", got, want)
	}
}
