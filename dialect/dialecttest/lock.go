package dialecttest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// RunLockMode runs the conformance suite of lock mode: a dialect whose
// claim locks rows in a transaction held until dialect.BatchCommitter.Commit
// (docs/adopting.md). The lease subtests of Run do not apply (there is no
// lease to expire, renew or reap); these replace them. Harness.Dialect must
// implement dialect.BatchCommitter; ExpireLease is not used.
func RunLockMode(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness, d lockDialect)
	}{
		{"LockedHeadBlocksItsKey", testLockedHeadBlocksKey},
		{"OutcomesVisibleOnCommit", testLockOutcomesOnCommit},
		{"FailedWriteRollsBackTheBatch", testLockRollback},
		{"NoLeaseToRenewOrReap", testLockNoLease},
		{"ConcurrentClaimersKeepOrder", testLockConcurrent},
		{"ClaimWindow", testLockClaimWindow},
		{"ClaimSweep", func(t *testing.T, h Harness, _ lockDialect) { testClaimSweep(t, h) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			d, ok := h.Dialect().(lockDialect)
			if !ok {
				t.Fatalf("%T does not implement dialect.BatchCommitter", h.Dialect())
			}
			tc.fn(t, h, d)
		})
	}
}

type lockDialect interface {
	dialect.Dialect
	dialect.BatchCommitter
}

func lockClaim(t *testing.T, ctx context.Context, d lockDialect, token string, limit int) []outbox.Message {
	t.Helper()
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: limit, Lease: longLease})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return msgs
}

func commit(t *testing.T, ctx context.Context, d lockDialect, token string) {
	t.Helper()
	if err := d.Commit(ctx, token); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// testLockedHeadBlocksItsKey: while one claimer holds a key's head locked,
// another claimer gets neither the head (SKIP LOCKED) nor the key's next
// row (the head is still pending to it).
func testLockedHeadBlocksKey(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "k"}, Row{Key: "k"}, Row{Key: "j"}, Row{})
	a := newToken()
	got := lockClaim(t, ctx, d, a, 10)
	if want := []string{ids[0], ids[2], ids[3]}; fmt.Sprint(idsOf(got)) != fmt.Sprint(want) {
		t.Fatalf("first claim got %v, want the heads %v", idsOf(got), want)
	}
	b := newToken()
	if other := lockClaim(t, ctx, d, b, 10); len(other) != 0 {
		t.Fatalf("a second claimer got %v while the heads are locked", idsOf(other))
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: a, IDs: idsOf(got)})
	wantAffected(t, "complete", n, err, 3)
	commit(t, ctx, d, a)
	next := lockClaim(t, ctx, d, b, 10)
	if len(next) != 1 || next[0].ID != ids[1] {
		t.Fatalf("after the commit got %v, want the key's next row %s", idsOf(next), ids[1])
	}
	commit(t, ctx, d, b) // nothing written: the row stays pending
	if r := row(t, ctx, h, ids[1]); r.State != outbox.StatePending {
		t.Fatalf("an unsettled row committed as %s", r.State)
	}
}

// testLockOutcomesOnCommit: complete, retry and dead are invisible until
// the batch commits, then recorded as the lease mode records them.
func testLockOutcomesOnCommit(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "a"}, Row{Key: "b"}, Row{Key: "c"})
	tok := newToken()
	if got := lockClaim(t, ctx, d, tok, 10); len(got) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(got))
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: tok, IDs: []string{ids[0]}})
	wantAffected(t, "complete", n, err, 1)
	n, err = d.Retry(ctx, dialect.RetryParams{Token: tok, Items: []dialect.RetryItem{{ID: ids[1], Attempt: 1, Delay: longLease, Error: "boom"}}})
	wantAffected(t, "retry", n, err, 1)
	n, err = d.Dead(ctx, dialect.DeadParams{Token: tok, Items: []dialect.DeadItem{{ID: ids[2], Attempt: 1, Error: "poison"}}})
	wantAffected(t, "dead", n, err, 1)
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StatePending {
		t.Fatalf("before commit the completed row reads %s, want pending", r.State)
	}
	commit(t, ctx, d, tok)
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StateSent {
		t.Errorf("completed row: %s, want sent", r.State)
	}
	if r := row(t, ctx, h, ids[1]); r.State != outbox.StatePending || r.Attempt != 1 || r.LastError == nil || *r.LastError != "boom" {
		t.Errorf("retried row: %+v", r)
	}
	if r := row(t, ctx, h, ids[2]); r.State != outbox.StateDead || r.LastError == nil || *r.LastError != "poison" {
		t.Errorf("dead row: %+v", r)
	}
	if got := lockClaim(t, ctx, d, newToken(), 10); len(got) != 0 {
		t.Fatalf("claimed %v: the retried row is not due yet", idsOf(got))
	}
}

// testLockRollback: a write that fails rolls the whole batch back, and
// Commit says so: the rows stay pending with nothing marked.
func testLockRollback(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "a"}, Row{Key: "b"})
	tok := newToken()
	lockClaim(t, ctx, d, tok, 10)
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: tok, IDs: []string{ids[0]}})
	wantAffected(t, "complete", n, err, 1)
	// An id the id column cannot hold makes the statement fail.
	if _, err := d.Retry(ctx, dialect.RetryParams{Token: tok, Items: []dialect.RetryItem{{ID: "not-an-id", Attempt: 1}}}); err == nil {
		t.Fatal("retry of a malformed id succeeded")
	} else if !outbox.IsPermanent(err) {
		t.Errorf("a failed write in lock mode is retryable (%v): the engine would retry a dead transaction", err)
	}
	if err := d.Commit(ctx, tok); err == nil {
		t.Fatal("commit after a failed write succeeded")
	}
	for _, id := range ids {
		if r := row(t, ctx, h, id); r.State != outbox.StatePending || r.Attempt != 0 {
			t.Fatalf("row %s after rollback: %+v", id, r)
		}
	}
	if got := lockClaim(t, ctx, d, newToken(), 10); len(got) != 2 {
		t.Fatalf("after rollback claimed %d rows, want 2", len(got))
	}
}

// testLockNoLease: Renew reports the rows held, ReleaseExpired has nothing
// to do, Release leaves the row pending.
func testLockNoLease(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{}, Row{})
	tok := newToken()
	lockClaim(t, ctx, d, tok, 10)
	n, err := d.Renew(ctx, dialect.RenewParams{Token: tok, Lease: longLease})
	wantAffected(t, "renew", n, err, 2)
	n, err = d.ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 10})
	wantAffected(t, "release expired", n, err, 0)
	n, err = d.Release(ctx, dialect.ReleaseParams{Token: tok, IDs: ids})
	wantAffected(t, "release", n, err, 2)
	commit(t, ctx, d, tok)
	n, err = d.Renew(ctx, dialect.RenewParams{Token: tok, Lease: longLease})
	wantAffected(t, "renew after commit", n, err, 0)
	if got := lockClaim(t, ctx, d, newToken(), 10); len(got) != 2 {
		t.Fatalf("released rows: claimed %d, want 2", len(got))
	}
}

// testLockConcurrent: several claimers drain keyed rows; every row is
// completed once, and per key in sequence order.
func testLockConcurrent(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	const keys, perKey = 8, 12
	var rows []Row
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			rows = append(rows, Row{Key: fmt.Sprintf("k%d", k), Payload: fmt.Sprintf(`{"n": %d}`, i)})
		}
	}
	ids := insert(t, ctx, h, rows...)
	seqOf := map[string]int64{}
	for _, id := range ids {
		seqOf[id] = row(t, ctx, h, id).Sequence
	}
	var (
		mu   sync.Mutex
		done = map[string]int{}
		last = map[string]int64{}
		bad  error
	)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				finished := len(done) == len(ids) || bad != nil
				mu.Unlock()
				if finished {
					return
				}
				tok := newToken()
				msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: tok, Limit: 5, Lease: longLease})
				if err != nil {
					mu.Lock()
					bad = err
					mu.Unlock()
					return
				}
				if len(msgs) == 0 {
					continue
				}
				if _, err := d.Complete(ctx, dialect.CompleteParams{Token: tok, IDs: idsOf(msgs)}); err != nil {
					mu.Lock()
					bad = err
					mu.Unlock()
					return
				}
				mu.Lock() // record in commit order
				for _, m := range msgs {
					done[m.ID]++
					if m.Key != "" && last[m.Key] > m.Sequence {
						bad = fmt.Errorf("key %s: sequence %d after %d", m.Key, m.Sequence, last[m.Key])
					}
					last[m.Key] = m.Sequence
				}
				err = d.Commit(ctx, tok)
				mu.Unlock()
				if err != nil {
					mu.Lock()
					bad = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	for _, id := range ids {
		if done[id] != 1 {
			t.Fatalf("row %s (sequence %d) completed %d times", id, seqOf[id], done[id])
		}
	}
}

// testLockClaimWindow: a windowed lock claim considers only rows within
// Window sequence numbers of the first due pending row, a locked one
// included (it is still pending). While another batch holds a deep key's
// head, the window holds only that key's later rows: the claim finds
// nothing there instead of walking the whole backlog behind them (in the
// benchmark, 50,000 rows for every claim beside a batch that held every
// head). The unbounded claim finds the heads further back.
func testLockClaimWindow(t *testing.T, h Harness, d lockDialect) {
	ctx := testContext(t)
	var rows []Row
	for range 20 {
		rows = append(rows, Row{Topic: "window.deep", Key: "deep"})
	}
	rows = append(rows, Row{Topic: "window.late", Key: "late-1"}, Row{Topic: "window.late", Key: "late-2"})
	ids := insert(t, ctx, h, rows...)

	a := newToken()
	got, err := d.Claim(ctx, dialect.ClaimParams{Token: a, Limit: 10, Lease: longLease, Window: 5})
	if err != nil {
		t.Fatalf("windowed claim: %v", err)
	}
	if fmt.Sprint(idsOf(got)) != fmt.Sprint([]string{ids[0]}) {
		t.Fatalf("windowed claim got %v, want only the deep key's head %s: the late heads are outside the window", idsOf(got), ids[0])
	}
	b := newToken()
	other, err := d.Claim(ctx, dialect.ClaimParams{Token: b, Limit: 10, Lease: longLease, Window: 5})
	if err != nil {
		t.Fatalf("windowed claim beside the locked head: %v", err)
	}
	if len(other) != 0 {
		t.Fatalf("windowed claim beside the locked deep head got %v, want nothing: the window starts at the locked head", idsOf(other))
	}
	c := newToken()
	late := lockClaim(t, ctx, d, c, 10)
	if want := []string{ids[20], ids[21]}; fmt.Sprint(idsOf(late)) != fmt.Sprint(want) {
		t.Fatalf("unbounded claim got %v, want the late heads %v", idsOf(late), want)
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: c, IDs: idsOf(late)})
	wantAffected(t, "complete", n, err, 2)
	commit(t, ctx, d, c)
	n, err = d.Complete(ctx, dialect.CompleteParams{Token: a, IDs: idsOf(got)})
	wantAffected(t, "complete", n, err, 1)
	commit(t, ctx, d, a)
}
