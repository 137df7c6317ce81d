package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/outbox"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/dialecttest"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestBucketModeConformance runs the properties every claim mode keeps on
// bucket mode.
func TestBucketModeConformance(t *testing.T) {
	dialecttest.RunBucketMode(t, func(t *testing.T) dialecttest.Harness {
		pg := testenv.Postgres(t)
		d, err := NewBucketMode(pg.Pool, dialect.DefaultMapping(), 30*time.Second, WithUniqueID(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		h := &bucketHarness{harness: harness{pool: pg.Pool, d: d.Dialect}, b: d}
		t.Cleanup(func() {
			for _, hd := range h.hold {
				hd.Close()
			}
		})
		return h
	})
}

type bucketHarness struct {
	harness
	b    *BucketDialect
	hold []*BucketDialect // made by HoldDialect, closed with the test
}

func (h *bucketHarness) Dialect() dialect.Dialect { return h.b }

// HoldDialect implements dialecttest.HoldHarness: bucket mode on the same
// table, rendered for relay.onDead: hold.
func (h *bucketHarness) HoldDialect() dialect.Dialect {
	d, err := NewBucketMode(h.pool, dialect.DefaultMapping(), 30*time.Second, WithHoldDeadKeys(true), WithUniqueID(true))
	if err != nil {
		panic(err) // the default mapping always renders
	}
	h.hold = append(h.hold, d)
	return d
}

// newBuckets is NewBucketMode on the bundled table with lease, closed at
// the end of the test.
func newBuckets(t *testing.T, pool *pgxpool.Pool, lease time.Duration) *BucketDialect {
	t.Helper()
	d, err := NewBucketMode(pool, dialect.DefaultMapping(), lease, WithUniqueID(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func insertKeyed(t *testing.T, ctx context.Context, pool *pgxpool.Pool, keys, perKey int) {
	t.Helper()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload)
		SELECT 't', 'k' || (g % $1::int), '{}'::jsonb FROM generate_series(0, $1::int * $2::int - 1) AS g ORDER BY g`, keys, perKey); err != nil {
		t.Fatal(err)
	}
}

// claimHeads inserts perKey rows for each of keys keys and has d claim the
// keys' heads under a new token; it returns the token and the rows.
func claimHeads(t *testing.T, ctx context.Context, pool *pgxpool.Pool, d *BucketDialect, keys, perKey int) (string, []outbox.Message) {
	t.Helper()
	insertKeyed(t, ctx, pool, keys, perKey)
	token := uuid.NewString()
	held, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: keys})
	if err != nil || len(held) != keys {
		t.Fatalf("claim: %d rows, %v; want the %d heads", len(held), err, keys)
	}
	return token, held
}

// TestBucketOfMatchesTheServer: the relay and the claim put a row in the
// same bucket, or its settlement would be fenced out.
func TestBucketOfMatchesTheServer(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	insertKeyed(t, ctx, pg.Pool, 500, 1)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('t', NULL, '{}'), ('t', '', '{}'), ('t', 'é/ключ ✓', '{}')`); err != nil {
		t.Fatal(err)
	}
	o := options{buckets: true}
	tmpl, err := parseQuery("q", `SELECT id::text, coalesce(key, ''), {{ template "bucketOf" (alias "o") }} FROM outbox AS o`, templateFuncs(dialect.DefaultMapping(), o))
	if err != nil {
		t.Fatal(err)
	}
	q, err := execute(tmpl, renderDataFor(dialect.DefaultMapping(), o))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	rows, err := pg.Pool.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var id, key string
	var b int32
	count := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &key, &b}, func() error {
		count++
		if got := bucketOf(key, id); got != int(b) {
			return fmt.Errorf("row %s key %q: server bucket %d, relay bucket %d", id, key, b, got)
		}
		seen[int(b)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != 503 || len(seen) != BucketCount {
		t.Fatalf("%d rows over %d buckets, want 503 over all %d", count, len(seen), BucketCount)
	}
}

// drain claims with each dialect in turn until every row is sent,
// completing each claim at once, and checks that no row is claimed twice
// and that each key's rows are completed in sequence order.
func drain(t *testing.T, ctx context.Context, pool *pgxpool.Pool, total int, ds ...*BucketDialect) map[*BucketDialect]int {
	t.Helper()
	claimed := map[string]bool{}
	last := map[string]int64{}
	per := map[*BucketDialect]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(claimed) < total {
		if time.Now().After(deadline) {
			t.Fatalf("drained %d of %d rows in 30 s", len(claimed), total)
		}
		for _, d := range ds {
			token := uuid.NewString()
			msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 50, Lease: d.lease})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if claimed[m.ID] {
					t.Fatalf("row %s claimed twice", m.ID)
				}
				claimed[m.ID] = true
				if m.Sequence <= last[m.Key] {
					t.Fatalf("key %s: row %d after %d", m.Key, m.Sequence, last[m.Key])
				}
				last[m.Key] = m.Sequence
			}
			per[d] += len(msgs)
			if len(msgs) > 0 {
				n, err := d.Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(msgs)})
				if err != nil || n != int64(len(msgs)) {
					t.Fatalf("complete %d rows: %d, %v", len(msgs), n, err)
				}
			}
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state <> 'sent'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows not sent (%v)", left, err)
	}
	return per
}

func idsOf(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// TestBucketMembersShareTheBuckets: a second relay gets half of the
// buckets once the first has settled its rows in them, and the two then
// deliver the table between them, each row once, each key in order.
func TestBucketMembersShareTheBuckets(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	a := newBuckets(t, pg.Pool, 2400*time.Millisecond) // a beat every 100 ms
	insertKeyed(t, ctx, pg.Pool, 200, 5)
	if got := drain(t, ctx, pg.Pool, 1000, a); got[a] != 1000 {
		t.Fatalf("one relay delivered %d of 1000", got[a])
	}
	if n := len(a.Owned()); n != BucketCount {
		t.Fatalf("one relay owns %d buckets, want %d", n, BucketCount)
	}
	b := newBuckets(t, pg.Pool, 2400*time.Millisecond)
	// b joins with its first claim; a has a row in flight in one of the
	// buckets it gives up, and must keep that bucket until it is settled.
	token, held := claimHeads(t, ctx, pg.Pool, a, 200, 5)
	if _, err := b.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 1}); err != nil {
		t.Fatal(err)
	}
	inFlight := map[int]bool{}
	for _, m := range held {
		inFlight[bucketOf(m.Key, m.ID)] = true
	}
	time.Sleep(time.Second) // ten beats: a reviews its share, b takes what is free
	for _, bk := range b.Owned() {
		if inFlight[bk] {
			t.Fatalf("the new relay took bucket %d while the other had a row in flight in it", bk)
		}
	}
	if got := len(a.Owned()); got < len(inFlight) {
		t.Fatalf("the first relay kept %d buckets, fewer than the %d it has rows in flight in", got, len(inFlight))
	}
	if _, err := a.Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(held)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Owned()) != BucketCount/2 || len(a.Owned()) != BucketCount/2 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d and %d buckets, want %d each", len(a.Owned()), len(b.Owned()), BucketCount/2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := pg.Pool.Exec(ctx, `DELETE FROM outbox`); err != nil {
		t.Fatal(err)
	}
	insertKeyed(t, ctx, pg.Pool, 200, 5)
	per := drain(t, ctx, pg.Pool, 1000, a, b)
	if per[a] == 0 || per[b] == 0 {
		t.Fatalf("rows per relay: %d and %d: both own buckets, both must deliver", per[a], per[b])
	}
	var owners int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(DISTINCT member) FROM outbox_qb_buckets`).Scan(&owners); err != nil || owners != 2 {
		t.Fatalf("buckets owned by %d members (%v), want 2", owners, err)
	}
}

// TestBucketLapsedMemberIsFencedOut: a relay whose membership ended (it
// could not renew it: a partition, a stall) loses its buckets to another
// relay; its settlements then change nothing, its renewal reports its rows
// lost, and the other relay delivers them.
func TestBucketLapsedMemberIsFencedOut(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	a := newBuckets(t, pg.Pool, 2400*time.Millisecond)
	token, held := claimHeads(t, ctx, pg.Pool, a, 20, 2)
	a.Close() // a stalls: no more beats; its membership ends as if it had stopped renewing
	a.mu.Lock()
	for _, r := range held {
		a.owned[bucketOf(r.Key, r.ID)] = a.tokens[token][0].epoch // what a still believes
	}
	a.lost = false
	a.mu.Unlock()
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox_qb_members (member, expires_at) VALUES ($1, now() - interval '1 second')
		ON CONFLICT (member) DO UPDATE SET expires_at = EXCLUDED.expires_at`, a.member); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `UPDATE outbox_qb_buckets SET member = $1 WHERE bucket = ANY($2::int[])`, a.member, a.Owned()); err != nil {
		t.Fatal(err)
	}
	b := newBuckets(t, pg.Pool, 2400*time.Millisecond)
	again, err := b.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 20 {
		t.Fatalf("the relay that took over claimed %d rows, want the 20 the lapsed relay held", len(again))
	}
	n, err := a.Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(held)})
	if err != nil || n != 0 {
		t.Fatalf("the lapsed relay's complete changed %d rows (%v), want 0", n, err)
	}
	var sent int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&sent); err != nil || sent != 0 {
		t.Fatalf("%d rows sent by a fenced-out relay (%v)", sent, err)
	}
	a.mu.Lock()
	a.tokens[token] = []heldRow{{id: held[0].ID, bucket: bucketOf(held[0].Key, held[0].ID), epoch: 1}}
	a.mu.Unlock()
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Renew(ctx, dialect.RenewParams{Token: token, Lease: time.Second}); err != nil || n != 0 {
		t.Fatalf("the lapsed relay's renewal reports %d rows held (%v), want 0", n, err)
	}
	if got := len(a.Owned()); got != 0 {
		t.Fatalf("the lapsed relay still believes it owns %d buckets", got)
	}
}

// TestBucketCompleteFencesEachBucket: a live relay that lost one bucket to
// another relay settles the rows of the buckets it still owns and none of
// the lost bucket's, and a row it does not hold under the claim's token is
// not settled, whatever its bucket.
func TestBucketCompleteFencesEachBucket(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	a := newBuckets(t, pg.Pool, 10*time.Second)
	token, held := claimHeads(t, ctx, pg.Pool, a, 40, 2)
	lost := bucketOf(held[0].Key, held[0].ID)
	if _, err := pg.Pool.Exec(ctx, `UPDATE outbox_qb_buckets SET member = gen_random_uuid(), epoch = epoch + 1 WHERE bucket = $1`, lost); err != nil {
		t.Fatal(err)
	}
	keep := 0
	for _, m := range held {
		if bucketOf(m.Key, m.ID) != lost {
			keep++
		}
	}
	var notHeld string // the second row of a key whose bucket a still owns
	if err := pg.Pool.QueryRow(ctx, `SELECT id::text FROM outbox WHERE state = 'pending' AND NOT (id = ANY($1::uuid[])) AND key = $2`,
		idsOf(held), held[len(held)-1].Key).Scan(&notHeld); err != nil {
		t.Fatal(err)
	}
	if bucketOf(held[len(held)-1].Key, held[len(held)-1].ID) == lost {
		t.Fatal("the test needs a key outside the lost bucket; change the keys")
	}
	n, err := a.Complete(ctx, dialect.CompleteParams{Token: token, IDs: append(idsOf(held), notHeld)})
	if err != nil || n != int64(keep) {
		t.Fatalf("complete changed %d rows (%v), want the %d of the buckets still owned", n, err, keep)
	}
	var sentLost, sentNotHeld int
	if err := pg.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE id = ANY($1::uuid[]) AND key = $2),
		count(*) FILTER (WHERE id = $3::uuid)
		FROM outbox WHERE state = 'sent'`, idsOf(held), held[0].Key, notHeld).Scan(&sentLost, &sentNotHeld); err != nil {
		t.Fatal(err)
	}
	if sentLost != 0 || sentNotHeld != 0 {
		t.Fatalf("sent: %d rows of the lost bucket, %d rows not held; want none", sentLost, sentNotHeld)
	}
}

// TestBucketCloseHandsOverAtOnce: a relay that stops releases its buckets,
// so the next relay takes them without waiting for a membership to end.
func TestBucketCloseHandsOverAtOnce(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	a := newBuckets(t, pg.Pool, time.Hour)
	insertKeyed(t, ctx, pg.Pool, 10, 1)
	if _, err := a.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 1}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := newBuckets(t, pg.Pool, time.Hour)
	msgs, err := b.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	// The row a claimed and never settled is pending: b delivers it too.
	if len(msgs) != 10 || len(b.Owned()) != BucketCount {
		t.Fatalf("after the other relay stopped: %d rows and %d buckets, want 10 and %d", len(msgs), len(b.Owned()), BucketCount)
	}
}

// TestBucketModeWaitsForLeaseModeRelays: a bucket-mode relay claims
// nothing while a lease-mode relay holds rows under a live lease (both
// would publish the same rows), says why, and returns rows a stopped
// lease-mode relay left processing to pending.
func TestBucketModeWaitsForLeaseModeRelays(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	insertKeyed(t, ctx, pg.Pool, 4, 1)
	lease := newDialect(t, pg.Pool, WithUniqueID(true))
	token := uuid.NewString()
	held, err := lease.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 1, Lease: time.Minute})
	if err != nil || len(held) != 1 {
		t.Fatalf("lease claim: %d rows, %v", len(held), err)
	}
	b := newBuckets(t, pg.Pool, time.Hour)
	if _, err := b.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 10}); err == nil || !strings.Contains(err.Error(), "lease mode") {
		t.Fatalf("claim beside a live lease: %v, want an error naming lease mode", err)
	}
	if _, err := pg.Pool.Exec(ctx, `UPDATE outbox SET lease_expires_at = now() - interval '1 second' WHERE claim_token = $1`, token); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 10})
	if err != nil || len(msgs) != 4 {
		t.Fatalf("claim once the lease expired: %d rows, %v; want all 4", len(msgs), err)
	}
}

// TestLiveBucketMembers: what a relay in another claim mode checks before
// it starts: a member while a bucket-mode relay runs, none once it stopped.
func TestLiveBucketMembers(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	m := dialect.DefaultMapping()
	if n, err := LiveBucketMembers(ctx, pg.Pool, m); err != nil || n != 0 {
		t.Fatalf("before bucket mode ever ran: %d members, %v", n, err)
	}
	d := newBuckets(t, pg.Pool, time.Hour)
	if _, err := d.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := LiveBucketMembers(ctx, pg.Pool, m); err != nil || n != 1 {
		t.Fatalf("beside a bucket-mode relay: %d members, %v; want 1", n, err)
	}
	d.Close()
	if n, err := LiveBucketMembers(ctx, pg.Pool, m); err != nil || n != 0 {
		t.Fatalf("after it stopped: %d members, %v; want 0", n, err)
	}
}

// TestBucketMemberRejoinsAfterItsMembershipEnded: a relay whose membership
// ended (the database was out of reach for longer than a lease) joins
// again with the same member id and gets its share back; the buckets that
// still name it are taken again under a new epoch, so its settlements from
// before are fenced out.
func TestBucketMemberRejoinsAfterItsMembershipEnded(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	a := newBuckets(t, pg.Pool, 2400*time.Millisecond) // a beat every 100 ms
	token, held := claimHeads(t, ctx, pg.Pool, a, 20, 2)
	var before int64
	if err := pg.Pool.QueryRow(ctx, `SELECT max(epoch) FROM outbox_qb_buckets`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// The membership ends under the relay's feet, as after a partition.
	if _, err := pg.Pool.Exec(ctx, `UPDATE outbox_qb_members SET expires_at = now() - interval '1 second' WHERE member = $1`, a.member); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var epoch int64
	for {
		if err := pg.Pool.QueryRow(ctx, `SELECT min(epoch) FROM outbox_qb_buckets WHERE member = $1`, a.member).Scan(&epoch); err == nil &&
			epoch > before && len(a.Owned()) == BucketCount {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the relay owns %d buckets (lowest epoch %d, was %d), want all %d again under new epochs", len(a.Owned()), epoch, before, BucketCount)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := a.Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(held)}); err != nil || n != 0 {
		t.Fatalf("a settlement from before the membership ended changed %d rows (%v), want 0", n, err)
	}
	again, err := a.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 100})
	if err != nil || len(again) != 20 {
		t.Fatalf("claim after joining again: %d rows, %v; want the 20 heads again", len(again), err)
	}
}

// TestBucketForgetLetsRowsBeClaimedAgain: the rows of a claim the engine
// gave up on (their settlement could not be written) are in flight no
// more once it forgets the claim, and the next claim takes them again.
func TestBucketForgetLetsRowsBeClaimedAgain(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	d := newBuckets(t, pg.Pool, time.Hour)
	insertKeyed(t, ctx, pg.Pool, 5, 1)
	token := uuid.NewString()
	if held, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 10}); err != nil || len(held) != 5 {
		t.Fatalf("claim: %d rows, %v", len(held), err)
	}
	if more, err := d.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 10}); err != nil || len(more) != 0 {
		t.Fatalf("a second claim took %d rows in flight (%v)", len(more), err)
	}
	d.Forget(token)
	if again, err := d.Claim(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: 10}); err != nil || len(again) != 5 {
		t.Fatalf("after Forget: %d rows, %v; want the 5 again", len(again), err)
	}
}

// TestFrontCursor: a claim at the front starts at the cursor while the
// last claim from the table's front is recent and no bucket was taken
// since; claims of the engine's sweep neither use nor move it.
func TestFrontCursor(t *testing.T) {
	now := time.Now()
	front := dialect.ClaimParams{Limit: 100, Window: 1000}
	var c frontCursor
	if p, cur := c.from(front, 7, now); cur || p.From != 0 {
		t.Fatalf("no cursor yet: From %d, cursor %v", p.From, cur)
	}
	c.found(front, false, 7, dialect.Claimed{Start: 500, Messages: make([]outbox.Message, 3)}, now)
	if p, cur := c.from(front, 7, now.Add(frontEvery/2)); !cur || p.From != 500 {
		t.Fatalf("after a front claim: From %d, cursor %v; want 500 from the cursor", p.From, cur)
	}
	for name, p := range map[string]dialect.ClaimParams{
		"a window of the sweep": {Limit: 100, Window: 1000, From: 900},
		"a skip list":           {Limit: 100, Window: 1000, Skip: []string{"k"}},
		"no window":             {Limit: 100},
	} {
		if q, cur := c.from(p, 7, now); cur || q.From != p.From {
			t.Errorf("%s: From %d, cursor %v; want the claim's own", name, q.From, cur)
		}
	}
	if _, cur := c.from(front, 8, now); cur {
		t.Error("a bucket was taken (gen 8): the cursor is still used")
	}
	if _, cur := c.from(front, 7, now.Add(frontEvery)); cur {
		t.Errorf("%v after the last claim from the front: the cursor is still used", frontEvery)
	}

	// A claim from the cursor moves it but is no claim from the front.
	c.found(dialect.ClaimParams{Limit: 100, Window: 1000, From: 500}, true, 7, dialect.Claimed{Start: 700, More: true}, now.Add(frontEvery/2))
	if p, cur := c.from(front, 7, now.Add(frontEvery*3/4)); !cur || p.From != 700 {
		t.Fatalf("after a claim from the cursor: From %d, cursor %v; want 700", p.From, cur)
	}
	if _, cur := c.from(front, 7, now.Add(frontEvery)); cur {
		t.Error("claims from the cursor put off the next claim from the front")
	}
	// A sweep's window says nothing of where the rows start.
	c.found(dialect.ClaimParams{Limit: 100, Window: 1000, From: 5000}, false, 7, dialect.Claimed{Start: 5000, More: true}, now)
	if c.seq != 700 {
		t.Errorf("a sweep's window moved the cursor to %d", c.seq)
	}
	// Nothing due from the front: no cursor.
	c.found(front, false, 7, dialect.Claimed{}, now)
	if _, cur := c.from(front, 7, now); cur {
		t.Error("a front claim found nothing, and the cursor is still used")
	}
}

// TestBucketsGen: the fingerprint of the buckets read does not depend on
// their order, and changes when a bucket is taken, even when another one
// of the same epoch is given up at the same time.
func TestBucketsGen(t *testing.T) {
	a := bucketsGen([]int32{1, 2, 3}, []int64{4, 5, 6})
	if b := bucketsGen([]int32{3, 1, 2}, []int64{6, 4, 5}); a != b {
		t.Errorf("order changed the fingerprint: %d, %d", a, b)
	}
	for name, g := range map[string]int64{
		"an epoch grew":                      bucketsGen([]int32{1, 2, 3}, []int64{4, 5, 7}),
		"a bucket taken":                     bucketsGen([]int32{1, 2, 3, 9}, []int64{4, 5, 6, 1}),
		"one bucket for another, same epoch": bucketsGen([]int32{1, 2, 9}, []int64{4, 5, 6}),
	} {
		if g == a {
			t.Errorf("%s: the fingerprint did not change", name)
		}
	}
}

// TestBucketCursorMissesNoRow: rows that become claimable behind the
// cursor (a forgotten claim's rows, a row committed late with a lower
// sequence) are claimed again within frontEvery, and no row is claimed
// while it is in flight.
func TestBucketCursorMissesNoRow(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	d := newBuckets(t, pg.Pool, time.Hour)
	// A row whose sequence is taken now and committed last.
	late, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	if _, err := late.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('t', 'late', '{}')`); err != nil {
		t.Fatal(err)
	}
	insertKeyed(t, ctx, pg.Pool, 3000, 1)
	inFlight := map[string]string{}   // id → token
	claimedKey := map[string]string{} // id → key
	claim := func() []outbox.Message {
		t.Helper()
		token := uuid.NewString()
		c, err := d.ClaimNext(ctx, dialect.ClaimParams{Token: token, Limit: 100, Window: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if _, dup := inFlight[m.ID]; dup {
				t.Fatalf("row %s (key %s) claimed while in flight", m.ID, m.Key)
			}
			inFlight[m.ID], claimedKey[m.ID] = token, m.Key
		}
		return c.Messages
	}
	first := claim()
	if len(first) != 100 || len(claim()) != 100 {
		t.Fatal("the first two claims did not take 100 rows each")
	}
	d.Forget(inFlight[first[0].ID])
	for _, m := range first {
		delete(inFlight, m.ID)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// 101 rows are claimable behind the cursor (100 forgotten, 1 late)
	// while claims from the cursor, one every 150 ms, still find rows past
	// it (2,700 of them): the claims reach them from the front within
	// frontEvery all the same.
	start := time.Now()
	back := func() bool {
		lateIn := false
		for id := range inFlight {
			if m, ok := claimedKey[id]; ok && m == "late" {
				lateIn = true
			}
		}
		for _, m := range first {
			if _, ok := inFlight[m.ID]; !ok {
				return false
			}
		}
		return lateIn
	}
	for !back() {
		// frontEvery (1 s) and a claim's cycle, with room for a loaded
		// machine; claims from the cursor alone would reach these rows
		// only after the 2,700 past it, 27 claims and over 4 s later.
		if time.Since(start) > 2500*time.Millisecond {
			t.Fatalf("%d rows in flight %v after 101 rows became claimable behind the cursor, not all of those", len(inFlight), time.Since(start))
		}
		claim()
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("the rows behind the cursor were claimed %v later, with %d rows in flight", time.Since(start).Round(time.Millisecond), len(inFlight))
}

// TestBucketBlockersLeaveOutRowsInFlight: a bucket-mode row in flight stays
// pending, but it is not what holds the window: the blockers name the rows
// the claim left, as a lease-mode claim does, so that the relay can tell a
// window that has only a few rows left.
func TestBucketBlockersLeaveOutRowsInFlight(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	d := newBuckets(t, pg.Pool, time.Hour)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('t', 'a', '{}'), ('t', 'a', '{}'), ('t', 'b', '{}')`); err != nil {
		t.Fatal(err)
	}
	claim := func(limit int) dialect.Claimed {
		t.Helper()
		c, err := d.ClaimNext(ctx, dialect.ClaimParams{Token: uuid.NewString(), Limit: limit, Window: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// In flight: a's head, then b's, which lies after a's second row.
	if n := len(claim(1).Messages) + len(claim(1).Messages); n != 2 {
		t.Fatalf("the two heads: %d claimed", n)
	}
	c := claim(100)
	if len(c.Messages) != 0 || !slices.Equal(c.Blockers, []string{"a"}) {
		t.Fatalf("claim with both heads in flight: %d rows, blockers %q; want none, and a's second row alone", len(c.Messages), c.Blockers)
	}
}
