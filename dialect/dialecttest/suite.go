package dialecttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// Timeouts of the suite. Short leases make the database clock pass quickly;
// waits are conditions polled against a deadline, never fixed sleeps.
const (
	shortLease = 200 * time.Millisecond
	longLease  = 30 * time.Second
	waitFor    = 10 * time.Second
)

// Run runs the conformance suite. newHarness is called once per subtest and
// must return a harness on a fresh, empty table owned by that subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	runTests(t, newHarness, deliveryTests, true)
	runInspector(t, newHarness)
}

// suiteTest is one test of the suite; lease marks those that look at
// processing rows or row leases, which bucket mode has not
// (RunBucketMode).
type suiteTest struct {
	name  string
	fn    func(t *testing.T, h Harness)
	lease bool
}

// deliveryTests are the tests of the delivery path.
var deliveryTests = []suiteTest{
	{"ExclusiveClaims", testExclusiveClaims, false},
	{"PerKeyOrder", testPerKeyOrder, false},
	{"LeaseExpiresMidPublish", testLeaseExpiresMidPublish, true},
	{"CommitOutOfSequenceOrder", testCommitOutOfSequenceOrder, false},
	{"FutureScheduledNotClaimed", testFutureScheduled, false},
	{"Renew", testRenew, true},
	{"Retry", testRetry, false},
	{"Dead", testDead, false},
	{"ReleaseSpendsNoAttempt", testRelease, false},
	{"ReleaseExpiredOnlyExpired", testReleaseExpired, true},
	{"MalformedHeaders", testMalformedHeaders, false},
	{"OneRowPerKeyPerClaim", testOneRowPerKey, false},
	{"NullAndEmptyKeysUnordered", testUnkeyed, false},
	{"EmptyInputs", testEmptyInputs, false},
	{"ClaimWindow", testClaimWindow, false},
	{"ClaimSweep", testClaimSweep, false},
}

// runTests runs tests in parallel, each on its own harness; withLease
// false leaves out the tests marked lease.
func runTests(t *testing.T, newHarness func(t *testing.T) Harness, tests []suiteTest, withLease bool) {
	for _, tc := range tests {
		if tc.lease && !withLease {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

func newToken() string { return uuid.NewString() }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func insert(t *testing.T, ctx context.Context, h Harness, rows ...Row) []string {
	t.Helper()
	ids, err := h.Insert(ctx, rows...)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if len(ids) != len(rows) {
		t.Fatalf("insert returned %d ids for %d rows", len(ids), len(rows))
	}
	return ids
}

func claim(t *testing.T, ctx context.Context, h Harness, token string, limit int, lease time.Duration) []outbox.Message {
	t.Helper()
	msgs, err := h.Dialect().Claim(ctx, dialect.ClaimParams{Token: token, Limit: limit, Lease: lease})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return msgs
}

func row(t *testing.T, ctx context.Context, h Harness, id string) RowState {
	t.Helper()
	r, err := h.Row(ctx, id)
	if err != nil {
		t.Fatalf("read row %s: %v", id, err)
	}
	return r
}

func now(t *testing.T, ctx context.Context, h Harness) time.Time {
	t.Helper()
	n, err := h.Now(ctx)
	if err != nil {
		t.Fatalf("database now: %v", err)
	}
	return n
}

func idsOf(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func wantAffected(t *testing.T, what string, got int64, err error, want int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s affected %d rows, want %d", what, got, want)
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", waitFor, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sortedBySequence(msgs []outbox.Message) bool {
	return slices.IsSortedFunc(msgs, func(a, b outbox.Message) int {
		switch {
		case a.Sequence < b.Sequence:
			return -1
		case a.Sequence > b.Sequence:
			return 1
		}
		return 0
	})
}

// testExclusiveClaims: 8 claimers race over keyed and unkeyed rows. No id is
// handed to two claimers while held, and every row is claimed exactly once
// when every claimer completes what it got.
func testExclusiveClaims(t *testing.T, h Harness) {
	ctx := testContext(t)
	const n = 2000
	rows := make([]Row, n)
	for i := range rows {
		if i%3 != 0 {
			rows[i].Key = fmt.Sprintf("k%d", i%97)
		}
	}
	all := insert(t, ctx, h, rows...)

	var (
		mu      sync.Mutex
		held    = map[string]string{} // id -> token
		claimed = map[string]int{}
		done    int
		errs    []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(waitFor * 3)
			for time.Now().Before(deadline) {
				token := newToken()
				msgs, err := h.Dialect().Claim(ctx, dialect.ClaimParams{Token: token, Limit: 37, Lease: longLease})
				if err != nil {
					fail("claim: %v", err)
					return
				}
				if !sortedBySequence(msgs) {
					fail("claim returned rows out of sequence order")
				}
				mu.Lock()
				for _, m := range msgs {
					if other, ok := held[m.ID]; ok {
						errs = append(errs, fmt.Sprintf("row %s claimed by %s while held by %s", m.ID, token, other))
					}
					held[m.ID] = token
					claimed[m.ID]++
				}
				finished := done == n
				mu.Unlock()
				if len(msgs) == 0 {
					if finished {
						return
					}
					time.Sleep(time.Millisecond) // other claimers hold the remaining heads
					continue
				}
				mu.Lock()
				for _, m := range msgs {
					delete(held, m.ID)
				}
				mu.Unlock()
				got, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(msgs)})
				if err != nil || got != int64(len(msgs)) {
					fail("complete: %d of %d rows, err %v", got, len(msgs), err)
					return
				}
				mu.Lock()
				done += len(msgs)
				mu.Unlock()
			}
			fail("claimers did not drain the table in time")
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	for _, id := range all {
		if claimed[id] != 1 {
			t.Errorf("row %s claimed %d times, want exactly once", id, claimed[id])
		}
	}
	if len(claimed) != n {
		t.Errorf("%d distinct rows claimed, want %d", len(claimed), n)
	}
}

// testPerKeyOrder: 3 claimers, random failures retried after small delays.
// For each key the successful completions are strictly increasing in
// sequence, and no key ever has two rows in flight.
func testPerKeyOrder(t *testing.T, h Harness) {
	ctx := testContext(t)
	const keys, perKey = 8, 25
	var rows []Row
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			rows = append(rows, Row{Key: fmt.Sprintf("key-%d", k), Payload: fmt.Sprintf(`{"i":%d}`, i)})
		}
	}
	insert(t, ctx, h, rows...)

	l := &keyLedger{total: len(rows), inFlight: map[string]int64{}, completed: map[string][]int64{}}
	var wg sync.WaitGroup
	for c := 0; c < 3; c++ {
		wg.Go(func() { claimKeyed(ctx, h, l, uint64(c)) })
	}
	wg.Wait()
	for _, e := range l.errs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	l.checkOrder(t, keys, perKey)
}

// keyLedger is what testPerKeyOrder's claimers saw, shared under mu: the
// sequence in flight for each key, each key's completions in order, and
// the violations.
type keyLedger struct {
	mu        sync.Mutex
	total     int
	inFlight  map[string]int64   // key -> sequence held
	completed map[string][]int64 // key -> sequences completed, in order
	done      int
	errs      []string
}

func (l *keyLedger) fail(format string, args ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *keyLedger) drained() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done == l.total
}

// claimed records a claim's rows in flight: a key with two rows in the
// claim, or with a row still in flight, is a violation.
func (l *keyLedger) claimed(msgs []outbox.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.Key] {
			l.errs = append(l.errs, fmt.Sprintf("key %s: two rows in one claim", m.Key))
		}
		seen[m.Key] = true
		if held, ok := l.inFlight[m.Key]; ok {
			l.errs = append(l.errs, fmt.Sprintf("key %s: sequence %d claimed while %d is in flight", m.Key, m.Sequence, held))
		}
		l.inFlight[m.Key] = m.Sequence
	}
}

// released forgets the keys of msgs in flight.
func (l *keyLedger) released(msgs []outbox.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		delete(l.inFlight, m.Key)
	}
}

// completedRows records the completed rows in each key's order.
func (l *keyLedger) completedRows(msgs []outbox.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		l.completed[m.Key] = append(l.completed[m.Key], m.Sequence)
	}
	l.done += len(msgs)
}

// checkOrder: every key completed perKey rows, in increasing sequence.
func (l *keyLedger) checkOrder(t *testing.T, keys, perKey int) {
	t.Helper()
	for k, seqs := range l.completed {
		if len(seqs) != perKey {
			t.Errorf("key %s: %d completions, want %d", k, len(seqs), perKey)
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Errorf("key %s: completions out of order: %v", k, seqs)
				break
			}
		}
	}
	if len(l.completed) != keys {
		t.Errorf("%d keys completed, want %d", len(l.completed), keys)
	}
}

// claimKeyed claims, holds and settles batches until the table is drained
// (or its time is up), failing about three rows in ten for a retry.
func claimKeyed(ctx context.Context, h Harness, l *keyLedger, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	deadline := time.Now().Add(waitFor * 3)
	for time.Now().Before(deadline) {
		if l.drained() {
			return
		}
		token := newToken()
		msgs, err := h.Dialect().Claim(ctx, dialect.ClaimParams{Token: token, Limit: 5, Lease: longLease})
		if err != nil {
			l.fail("claim: %v", err)
			return
		}
		if len(msgs) == 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		l.claimed(msgs)
		// "Publish": hold the rows briefly so that overlaps would show.
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		if !settleRandomly(ctx, h, l, rng, token, msgs) {
			return
		}
	}
	l.fail("claimers did not drain the table in time")
}

// settleRandomly retries about three rows of msgs in ten, after a small
// delay, and completes the rest. It reports false when a write failed.
func settleRandomly(ctx context.Context, h Harness, l *keyLedger, rng *rand.Rand, token string, msgs []outbox.Message) bool {
	var ok []outbox.Message
	var retry []dialect.RetryItem
	for _, m := range msgs {
		if rng.IntN(10) < 3 {
			retry = append(retry, dialect.RetryItem{
				ID: m.ID, Attempt: m.Attempt + 1,
				Delay: time.Duration(rng.IntN(20)) * time.Millisecond, Error: "random failure",
			})
		} else {
			ok = append(ok, m)
		}
	}
	// Forget the in-flight keys before the writes: once a write
	// commits, another claimer may rightly take the key's next row.
	l.released(msgs)
	if len(retry) > 0 {
		got, err := h.Dialect().Retry(ctx, dialect.RetryParams{Token: token, Items: retry})
		if err != nil || got != int64(len(retry)) {
			l.fail("retry: %d of %d rows, err %v", got, len(retry), err)
			return false
		}
	}
	if len(ok) > 0 {
		got, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(ok)})
		if err != nil || got != int64(len(ok)) {
			l.fail("complete: %d of %d rows, err %v", got, len(ok), err)
			return false
		}
		l.completedRows(ok)
	}
	return true
}

// testLeaseExpiresMidPublish: the owner's lease expires while it publishes.
// Its writes are fenced off before and after another claimer takes the row.
func testLeaseExpiresMidPublish(t *testing.T, h Harness) {
	ctx := testContext(t)
	id := insert(t, ctx, h, Row{Key: "k"})[0]
	d := h.Dialect()

	stale := newToken()
	if got := claim(t, ctx, h, stale, 10, shortLease); len(got) != 1 || got[0].ID != id {
		t.Fatalf("first claim = %v, want [%s]", idsOf(got), id)
	}
	// Wait for the lease to pass on the database clock.
	eventually(t, "lease expired", func() bool {
		r := row(t, ctx, h, id)
		return r.LeaseExpiresAt != nil && !r.LeaseExpiresAt.After(now(t, ctx, h))
	})
	// Still processing under the stale token, but the lease has expired:
	// every fenced write misses.
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: stale, IDs: []string{id}})
	wantAffected(t, "stale complete before reclaim", n, err, 0)
	n, err = d.Renew(ctx, dialect.RenewParams{Token: stale, Lease: longLease})
	wantAffected(t, "stale renew", n, err, 0)
	if r := row(t, ctx, h, id); r.State != outbox.StateProcessing {
		t.Fatalf("state after missed writes = %s, want processing", r.State)
	}

	n, err = d.ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 100})
	wantAffected(t, "release expired", n, err, 1)
	fresh := newToken()
	got := claim(t, ctx, h, fresh, 10, longLease)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("reclaim = %v, want [%s]", idsOf(got), id)
	}
	if got[0].Attempt != 0 {
		t.Errorf("an expired lease spent an attempt: attempt %d", got[0].Attempt)
	}

	// The stale owner's late writes cannot touch the new owner's claim.
	n, err = d.Complete(ctx, dialect.CompleteParams{Token: stale, IDs: []string{id}})
	wantAffected(t, "stale complete", n, err, 0)
	n, err = d.Retry(ctx, dialect.RetryParams{Token: stale, Items: []dialect.RetryItem{{ID: id, Attempt: 1, Error: "late"}}})
	wantAffected(t, "stale retry", n, err, 0)
	n, err = d.Dead(ctx, dialect.DeadParams{Token: stale, Items: []dialect.DeadItem{{ID: id, Attempt: 1, Error: "late"}}})
	wantAffected(t, "stale dead", n, err, 0)
	n, err = d.Release(ctx, dialect.ReleaseParams{Token: stale, IDs: []string{id}})
	wantAffected(t, "stale release", n, err, 0)
	if r := row(t, ctx, h, id); r.State != outbox.StateProcessing || r.ClaimToken != fresh {
		t.Fatalf("after stale writes: state %s token %s, want processing by %s", r.State, r.ClaimToken, fresh)
	}

	n, err = d.Complete(ctx, dialect.CompleteParams{Token: fresh, IDs: []string{id}})
	wantAffected(t, "new owner's complete", n, err, 1)
	n, err = d.Dead(ctx, dialect.DeadParams{Token: stale, Items: []dialect.DeadItem{{ID: id, Attempt: 1, Error: "late"}}})
	wantAffected(t, "stale dead after sent", n, err, 0)
	r := row(t, ctx, h, id)
	if r.State != outbox.StateSent || r.LastError != nil {
		t.Fatalf("final state %s (error %v), want sent with no error", r.State, r.LastError)
	}
}

// testCommitOutOfSequenceOrder: rows that commit out of sequence order are
// never skipped. Two writers insert rows of one key; the later sequence
// commits first. The claim cannot see the uncommitted earlier row, so it
// delivers the later row; once the earlier row commits it is the lowest
// unfinished sequence of the key and is claimed next (even while the later
// row is still in flight). So with two writers of one key, delivery follows
// commit order, not sequence order, and per-key order holds only under the
// documented assumption of one writer (one transaction at a time) per key.
func testCommitOutOfSequenceOrder(t *testing.T, h Harness) {
	ctx := testContext(t)
	w1, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w1.Rollback(ctx) }()
	early, err := w1.Insert(ctx, Row{Key: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	earlyUnkeyed, err := w1.Insert(ctx, Row{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w2.Rollback(ctx) }()
	late, err := w2.Insert(ctx, Row{Key: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	token := newToken()
	got := claim(t, ctx, h, token, 10, longLease)
	if len(got) != 1 || got[0].ID != late {
		t.Fatalf("claim with the earlier rows uncommitted = %v, want [%s]", idsOf(got), late)
	}
	if err := w1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if row(t, ctx, h, early).Sequence >= row(t, ctx, h, late).Sequence {
		t.Fatal("test setup: the first writer's row should have the lower sequence")
	}
	got = claim(t, ctx, h, newToken(), 10, longLease)
	want := []string{early, earlyUnkeyed}
	if !slices.Equal(idsOf(got), want) {
		t.Fatalf("claim after the earlier commit = %v, want %v (nothing skipped)", idsOf(got), want)
	}
}

func testFutureScheduled(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Delay: time.Hour}, Row{Delay: 300 * time.Millisecond}, Row{Key: "k", Delay: time.Hour}, Row{Key: "k"})
	future, soon, keyedFuture, keyedNext := ids[0], ids[1], ids[2], ids[3]

	if got := claim(t, ctx, h, newToken(), 10, longLease); len(got) != 0 {
		t.Fatalf("claimed %v before anything was due", got)
	}
	var got []outbox.Message
	eventually(t, "the row due in 300ms is claimed", func() bool {
		got = claim(t, ctx, h, newToken(), 10, longLease)
		return len(got) > 0
	})
	if len(got) != 1 || got[0].ID != soon {
		t.Fatalf("claim = %v, want only [%s]", got, soon)
	}
	for _, id := range []string{future, keyedFuture, keyedNext} {
		if r := row(t, ctx, h, id); r.State != outbox.StatePending {
			t.Errorf("row %s: state %s, want pending", id, r.State)
		}
	}
}

func testRenew(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{}, Row{}, Row{})
	token := newToken()
	got := claim(t, ctx, h, token, 2, shortLease)
	if len(got) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(got))
	}
	otherToken := newToken()
	other := claim(t, ctx, h, otherToken, 10, shortLease)
	if len(other) != 1 || other[0].ID != ids[2] {
		t.Fatalf("second claim = %v, want [%s]", other, ids[2])
	}
	before := now(t, ctx, h)
	n, err := h.Dialect().Renew(ctx, dialect.RenewParams{Token: token, Lease: longLease})
	wantAffected(t, "renew", n, err, 2)
	for _, m := range got {
		r := row(t, ctx, h, m.ID)
		if r.LeaseExpiresAt == nil || r.LeaseExpiresAt.Before(before.Add(longLease-time.Second)) {
			t.Errorf("row %s: lease expires at %v, want about %v", m.ID, r.LeaseExpiresAt, before.Add(longLease))
		}
	}
	// The other claim's short lease runs out: renewing it then misses.
	eventually(t, "the short lease expired", func() bool {
		r := row(t, ctx, h, ids[2])
		return !r.LeaseExpiresAt.After(now(t, ctx, h))
	})
	n, err = h.Dialect().Renew(ctx, dialect.RenewParams{Token: otherToken, Lease: longLease})
	wantAffected(t, "renew after the lease expired", n, err, 0)
	n, err = h.Dialect().Renew(ctx, dialect.RenewParams{Token: newToken(), Lease: longLease})
	wantAffected(t, "renew with an unknown token", n, err, 0)
	n, err = h.Dialect().ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 10})
	wantAffected(t, "release expired (renewed rows stay)", n, err, 1)
}

func testRetry(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "a"}, Row{Key: "a"}, Row{Key: "b"})
	token := newToken()
	got := claim(t, ctx, h, token, 10, longLease)
	if len(got) != 2 {
		t.Fatalf("claimed %v, want the heads of a and b", got)
	}
	before := now(t, ctx, h)
	n, err := h.Dialect().Retry(ctx, dialect.RetryParams{Token: token, Items: []dialect.RetryItem{
		{ID: ids[0], Attempt: 1, Delay: time.Hour, Error: "broker said no"},
		{ID: ids[2], Attempt: 3, Delay: 300 * time.Millisecond, Error: "timeout"},
	}})
	wantAffected(t, "retry", n, err, 2)
	after := now(t, ctx, h)

	r := row(t, ctx, h, ids[0])
	if r.State != outbox.StatePending || r.Attempt != 1 || r.LastError == nil || *r.LastError != "broker said no" {
		t.Fatalf("retried row: %+v", r)
	}
	if r.ClaimToken != "" || r.LeaseExpiresAt != nil {
		t.Errorf("retried row keeps its claim: token %q lease %v", r.ClaimToken, r.LeaseExpiresAt)
	}
	if r.ScheduledAt.Before(before.Add(time.Hour)) || r.ScheduledAt.After(after.Add(time.Hour)) {
		t.Errorf("scheduled_at %v, want database now + 1h in [%v, %v]", r.ScheduledAt, before.Add(time.Hour), after.Add(time.Hour))
	}
	// The retried head still holds its key: a's next row is not claimable.
	if got := claim(t, ctx, h, newToken(), 10, longLease); len(got) != 0 {
		t.Fatalf("claimed %v while nothing is due", got)
	}
	var again []outbox.Message
	eventually(t, "b is due again", func() bool {
		again = claim(t, ctx, h, newToken(), 10, longLease)
		return len(again) > 0
	})
	if len(again) != 1 || again[0].ID != ids[2] || again[0].Attempt != 3 {
		t.Fatalf("reclaim = %+v, want %s at attempt 3", again, ids[2])
	}
	if r := row(t, ctx, h, ids[2]); r.LastError == nil || *r.LastError != "timeout" {
		t.Errorf("last_error not kept while processing again: %v", r.LastError)
	}
	n, err = h.Dialect().Complete(ctx, dialect.CompleteParams{Token: newToken(), IDs: []string{ids[2]}})
	wantAffected(t, "complete with a wrong token", n, err, 0)
}

func testDead(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "a"}, Row{Key: "a"})
	token := newToken()
	got := claim(t, ctx, h, token, 10, longLease)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claim = %v, want [%s]", got, ids[0])
	}
	n, err := h.Dialect().Dead(ctx, dialect.DeadParams{Token: token, Items: []dialect.DeadItem{{ID: ids[0], Attempt: 5, Error: "poison"}}})
	wantAffected(t, "dead", n, err, 1)
	r := row(t, ctx, h, ids[0])
	if r.State != outbox.StateDead || r.Attempt != 5 || r.LastError == nil || *r.LastError != "poison" {
		t.Fatalf("dead row: %+v", r)
	}
	// A dead row releases its key.
	got = claim(t, ctx, h, newToken(), 10, longLease)
	if len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("claim after dead = %v, want [%s]", got, ids[1])
	}
	n, err = h.Dialect().Dead(ctx, dialect.DeadParams{Token: token, Items: []dialect.DeadItem{{ID: ids[0], Attempt: 6, Error: "again"}}})
	wantAffected(t, "dead twice", n, err, 0)
}

func testRelease(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{Key: "a"}, Row{Key: "a"}, Row{})
	token := newToken()
	got := claim(t, ctx, h, token, 10, longLease)
	if len(got) != 2 {
		t.Fatalf("claim = %v, want 2 rows", got)
	}
	n, err := h.Dialect().Release(ctx, dialect.ReleaseParams{Token: newToken(), IDs: []string{ids[0], ids[2]}})
	wantAffected(t, "release with another token", n, err, 0)
	n, err = h.Dialect().Release(ctx, dialect.ReleaseParams{Token: token, IDs: []string{ids[0], ids[2]}})
	wantAffected(t, "release", n, err, 2)
	r := row(t, ctx, h, ids[0])
	if r.State != outbox.StatePending || r.Attempt != 0 || r.ClaimToken != "" || r.LeaseExpiresAt != nil || r.LastError != nil {
		t.Fatalf("released row: %+v", r)
	}
	got = claim(t, ctx, h, newToken(), 10, longLease)
	if !slices.Equal(idsOf(got), []string{ids[0], ids[2]}) || got[0].Attempt != 0 {
		t.Fatalf("reclaim = %+v, want %s (attempt 0) and %s", got, ids[0], ids[2])
	}
}

func testReleaseExpired(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{}, Row{}, Row{}, Row{}, Row{}, Row{})
	token := newToken()
	got := claim(t, ctx, h, token, 4, longLease) // ids[0..3] processing, [4..5] pending
	if len(got) != 4 {
		t.Fatalf("claimed %d rows, want 4", len(got))
	}
	n, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: token, IDs: []string{ids[3]}})
	wantAffected(t, "complete", n, err, 1)

	n, err = h.Dialect().ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 100})
	wantAffected(t, "release expired with none expired", n, err, 0)
	for _, id := range ids[:3] {
		if err := h.ExpireLease(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	n, err = h.Dialect().ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 2})
	wantAffected(t, "release expired, limit 2", n, err, 2)
	n, err = h.Dialect().ReleaseExpired(ctx, dialect.ReleaseExpiredParams{Limit: 2})
	wantAffected(t, "release expired, the rest", n, err, 1)
	want := []outbox.State{outbox.StatePending, outbox.StatePending, outbox.StatePending, outbox.StateSent, outbox.StatePending, outbox.StatePending}
	for i, id := range ids {
		r := row(t, ctx, h, id)
		if r.State != want[i] {
			t.Errorf("row %d: state %s, want %s", i, r.State, want[i])
		}
		if i < 3 && (r.ClaimToken != "" || r.LeaseExpiresAt != nil || r.Attempt != 0) {
			t.Errorf("row %d released with claim %q lease %v attempt %d", i, r.ClaimToken, r.LeaseExpiresAt, r.Attempt)
		}
	}
}

func testMalformedHeaders(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h,
		Row{Headers: `{"trace":"abc","tenant":"t1"}`},
		Row{Headers: `{"n":1}`},
		Row{Headers: `["a","b"]`},
		Row{Headers: `"text"`},
		Row{Payload: `{"deep":{"x":[1,2]}}`},
	)
	got := claim(t, ctx, h, newToken(), 10, longLease)
	if len(got) != len(ids) {
		t.Fatalf("claimed %d rows, want %d: malformed rows must not fail the claim", len(got), len(ids))
	}
	byID := map[string]outbox.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	good := byID[ids[0]]
	if good.Malformed != nil || good.Headers["trace"] != "abc" || good.Headers["tenant"] != "t1" {
		t.Errorf("good headers: %v (malformed %v)", good.Headers, good.Malformed)
	}
	for _, id := range ids[1:4] {
		if byID[id].Malformed == nil {
			t.Errorf("row %s: headers not an object of strings, but Malformed is nil", id)
		}
	}
	m := byID[ids[4]]
	if m.Malformed != nil || len(m.Headers) != 0 {
		t.Errorf("default headers: %v (malformed %v)", m.Headers, m.Malformed)
	}
	if !jsonEqual(m.Payload, `{"deep":{"x":[1,2]}}`) {
		t.Errorf("payload = %s", m.Payload)
	}
}

func testOneRowPerKey(t *testing.T, h Harness) {
	ctx := testContext(t)
	var rows []Row
	for i := 0; i < 4; i++ {
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			rows = append(rows, Row{Key: k, Topic: "t." + k})
		}
	}
	ids := insert(t, ctx, h, rows...)
	token := newToken()
	got := claim(t, ctx, h, token, 100, longLease)
	if !slices.Equal(idsOf(got), ids[:5]) {
		t.Fatalf("claim = %v, want the five heads %v", idsOf(got), ids[:5])
	}
	for _, m := range got {
		if m.Key == "" || m.Topic != "t."+m.Key {
			t.Errorf("message fields: %+v", m)
		}
	}
	if more := claim(t, ctx, h, newToken(), 100, longLease); len(more) != 0 {
		t.Fatalf("claimed %v while every key has a row in flight", idsOf(more))
	}
	n, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(got)})
	wantAffected(t, "complete", n, err, 5)
	got = claim(t, ctx, h, newToken(), 3, longLease)
	if !slices.Equal(idsOf(got), ids[5:8]) {
		t.Fatalf("next claim (limit 3) = %v, want %v", idsOf(got), ids[5:8])
	}
}

func testUnkeyed(t *testing.T, h Harness) {
	ctx := testContext(t)
	ids := insert(t, ctx, h, Row{}, Row{}, Row{}, Row{EmptyKey: true}, Row{EmptyKey: true}, Row{EmptyKey: true})
	got := claim(t, ctx, h, newToken(), 10, longLease)
	if !slices.Equal(idsOf(got), ids) {
		t.Fatalf("claim = %v, want all of %v", idsOf(got), ids)
	}
	for _, m := range got {
		if m.Key != "" {
			t.Errorf("key = %q, want empty", m.Key)
		}
	}
}

func testEmptyInputs(t *testing.T, h Harness) {
	ctx := testContext(t)
	insert(t, ctx, h, Row{})
	d := h.Dialect()
	tok := newToken()
	if got := claim(t, ctx, h, tok, 0, longLease); len(got) != 0 {
		t.Fatalf("limit 0 claimed %v", got)
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: tok})
	wantAffected(t, "complete nothing", n, err, 0)
	n, err = d.Retry(ctx, dialect.RetryParams{Token: tok})
	wantAffected(t, "retry nothing", n, err, 0)
	n, err = d.Dead(ctx, dialect.DeadParams{Token: tok})
	wantAffected(t, "dead nothing", n, err, 0)
	n, err = d.Release(ctx, dialect.ReleaseParams{Token: tok})
	wantAffected(t, "release nothing", n, err, 0)
	n, err = d.Renew(ctx, dialect.RenewParams{Token: tok, Lease: longLease})
	wantAffected(t, "renew nothing", n, err, 0)
}
