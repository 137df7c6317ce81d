package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// holdTurn opens a transaction that holds d's table's claim turn, as
// another relay's claim would; it is rolled back when the test ends unless
// committed first.
func holdTurn(t *testing.T, ctx context.Context, pool *pgxpool.Pool, d *Dialect) pgx.Tx {
	t.Helper()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	if _, err := holder.Exec(ctx, d.turnSQL); err != nil {
		t.Fatal(err)
	}
	return holder
}

// backendPID is the backend of the connection pool hands out next: with a
// pool of one (or one connection left), the same connection every time.
func backendPID(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (pid int) {
	t.Helper()
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// oneRowTurnHeld sets up a pool of two connections over a table of one
// pending row, whose claim turn another transaction holds (holdTurn): one
// connection for the holder, one for the claim under test.
func oneRowTurnHeld(t *testing.T) (*testenv.PG, context.Context, *Dialect, pgx.Tx) {
	t.Helper()
	pg := testenv.Postgres(t, testenv.WithMaxConns(2))
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns', '{}')`)
	return pg, ctx, d, holdTurn(t, ctx, pg.Pool, d)
}

// turnWaiters counts the backends waiting for this schema's claim turn.
const turnWaiters = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid::bigint = $1 AND objid = 'outbox'::regclass::oid`

// claimBehind starts a claim with token while holder holds the claim turn,
// and returns once the claim waits for it; the channel has its result.
func claimBehind(t *testing.T, ctx context.Context, d *Dialect, holder pgx.Tx, token string) <-chan error {
	t.Helper()
	claimed := make(chan error, 1)
	go func() {
		_, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 10, Lease: time.Minute})
		claimed <- err
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		if err := holder.QueryRow(ctx, turnWaiters, claimTurnSpace).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, "the claim never waited for the turn")
	return claimed
}

// TestTurnClaimCancelledWhileWaiting: a claim whose context ends while it
// waits for the table's turn returns at once, and its statement is
// cancelled on the server. Giving up on the socket alone (pgx's default)
// would leave the server waiting for the turn, then claiming rows that
// nobody reads, which would wait for their lease to expire.
func TestTurnClaimCancelledWhileWaiting(t *testing.T) {
	_, ctx, d, holder := oneRowTurnHeld(t)

	waiters := func() int {
		t.Helper()
		var n int
		if err := holder.QueryRow(ctx, turnWaiters, claimTurnSpace).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := d.Claim(cctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000b1", Limit: 10, Lease: time.Minute})
		done <- result{len(msgs), err}
	}()
	// Cancel only once the server waits for the turn on the claim's behalf.
	testenv.Eventually(t, 10*time.Second, func() bool { return waiters() == 1 }, "the claim never waited for the turn")
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the claim did not return within 5s of its context's end")
	}
	if r.err == nil || r.n != 0 {
		t.Fatalf("claim cancelled while the turn is held: %d rows, %v; want an error", r.n, r.err)
	}
	// The server no longer waits for the turn on the claim's behalf.
	testenv.Eventually(t, 10*time.Second, func() bool { return waiters() == 0 }, "the cancelled claim still waits for the turn on the server")
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing was claimed behind the caller's back, and the pool works.
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000b2", Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("claim after the cancelled one: %d rows, %v; want the row", len(msgs), err)
	}
}

// TestTurnClaimErrorLeavesTheConnectionUsable: a claim statement that fails
// after the turn was granted returns the server's error, releases the turn,
// and leaves its connection ready for the next statement (a pool of one, so
// that the next claims run on it; its backend pid shows it is the same
// connection). A column whose type changes under the prepared claim fails
// one claim, not every claim on the connection. With a plan for each
// execution, as `queuebox run` connects.
func TestTurnClaimErrorLeavesTheConnectionUsable(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithMaxConns(1))
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	pg.MustExec(t, ctx, `SET plan_cache_mode = force_custom_plan`)
	pid := func() int { return backendPID(t, ctx, pg.Pool) }
	first := pid()
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) SELECT 'turns', '{}' FROM generate_series(1, 3)`)
	pg.MustExec(t, ctx, `CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'claims refused by the test'; END $$`)
	pg.MustExec(t, ctx, `CREATE TRIGGER refuse_claim BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_claim()`)
	for i := range 3 {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000c1", Limit: 2, Lease: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "claims refused by the test") || len(msgs) != 0 {
			t.Fatalf("claim %d against the refusing trigger: %d rows, %v; want the trigger's error", i, len(msgs), err)
		}
	}
	pg.MustExec(t, ctx, `DROP TRIGGER refuse_claim ON outbox`)
	var held int
	if err := pg.Pool.QueryRow(ctx, strings.Replace(turnWaiters, "AND NOT granted", "", 1), claimTurnSpace).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d turn locks held after the failed claims", held)
	}
	if p := pid(); p != first {
		t.Fatalf("the failed claims replaced the connection (backend %d, then %d): the test no longer shows it stays usable", first, p)
	}
	// The claim is prepared on the connection now; change a column's type
	// under it.
	if msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000c3", Limit: 1, Lease: time.Minute}); err != nil || len(msgs) != 1 {
		t.Fatalf("claim before the column change: %d rows, %v", len(msgs), err)
	}
	pg.MustExec(t, ctx, `UPDATE outbox SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL`)
	// Then the statements vanish under the claim, as a pooler's DISCARD ALL
	// makes them.
	for _, c := range []struct{ what, change string }{
		{"the column changed type", `ALTER TABLE outbox ALTER COLUMN topic TYPE varchar(300)`},
		{"the prepared statements vanished", `DISCARD ALL`},
	} {
		what, change := c.what, c.change
		pg.MustExec(t, ctx, change)
		pg.MustExec(t, ctx, `SET plan_cache_mode = force_custom_plan`) // DISCARD ALL resets it
		failed := 0
		for {
			msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000c4", Limit: 1, Lease: time.Minute})
			if err == nil && len(msgs) == 1 {
				break
			}
			if failed++; failed > 1 {
				t.Fatalf("claim %d after %s: %d rows, %v; want at most one failure", failed, what, len(msgs), err)
			}
		}
		pg.MustExec(t, ctx, `UPDATE outbox SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL`)
	}
	// Two claims of two rows, then one of the last: nothing left unread on
	// the connection, and the rows come in order.
	var got []string
	for _, want := range []int{2, 1, 0} {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000c2", Limit: 2, Lease: time.Minute})
		if err != nil || len(msgs) != want {
			t.Fatalf("claim after the failures: %d rows, %v; want %d", len(msgs), err, want)
		}
		for _, m := range msgs {
			if m.Topic != "turns" || string(m.Payload) != "{}" || m.Sequence == 0 || m.CreatedAt.IsZero() || m.MaxAttempts == 0 {
				t.Errorf("claimed row decoded as %+v", m)
			}
			got = append(got, m.ID)
		}
	}
	if len(got) != 3 || got[0] == got[1] || got[1] == got[2] {
		t.Errorf("claimed ids %v, want three distinct", got)
	}
}

// TestClaimShapesBeyondTheKeptOnesAreNotKeptPrepared: turnClaim leaves the
// claim prepared on its connection only for the shapes the dialect keeps
// (maxClaimShapes); a caller asking for ever new limits still claims, in
// turn, and the connection does not fill with prepared statements (a pool
// of one: every claim runs on the connection that pg_prepared_statements
// then describes).
func TestClaimShapesBeyondTheKeptOnesAreNotKeptPrepared(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithMaxConns(1))
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	const shapes = 3 * maxClaimShapes
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) SELECT 'shapes', '{}' FROM generate_series(1, $1::int)`, shapes*(shapes+1)/2)
	for limit := 1; limit <= shapes; limit++ {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000d1", Limit: limit, Lease: time.Minute})
		if err != nil || len(msgs) != limit {
			t.Fatalf("claim of %d: %d rows, %v", limit, len(msgs), err)
		}
	}
	var named int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '-- claim:%' AND name NOT LIKE 'stmtcache_%'`).Scan(&named); err != nil {
		t.Fatal(err)
	}
	if named == 0 || named > maxClaimShapes {
		t.Errorf("%d claim statements prepared for good on the connection after %d shapes; want 1 to %d", named, shapes, maxClaimShapes)
	}
}

// TestTurnWaitIsObserved: ObserveTurnWait receives, per claim, the time it
// waited for the table's claim turn: at least as long as another claim
// held it.
func TestTurnWaitIsObserved(t *testing.T) {
	_, ctx, d, holder := oneRowTurnHeld(t)
	waits := make(chan time.Duration, 4)
	d.ObserveTurnWait(func(w time.Duration) { waits <- w })
	claimed := claimBehind(t, ctx, d, holder, "6f1c1a5e-0000-4000-8000-0000000000e1")
	const held = 300 * time.Millisecond
	time.Sleep(held)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-waits:
		if w < held {
			t.Errorf("observed a wait of %v for a turn held at least %v after the claim queued", w, held)
		}
	default:
		t.Fatal("no turn wait observed")
	}
}

// TestPollAfterTheClaimChangedUnderIt: a poll (pollClaim) runs the claim
// shapes that turnClaim prepares, through pgx's statement cache. When a
// column changes type under them, or a pooler's DISCARD ALL drops them, a
// poll fails at most once for each of its statements, then works: it must not share
// turnClaim's prepared statement, which pgx files under the statement's
// text when prepared under it, does not invalidate after an error, and
// only turnClaim repairs. Idle relays only poll, so before the fix they
// failed on that connection until it was recycled. A pool of one, so that
// every claim runs on the same connection.
func TestPollAfterTheClaimChangedUnderIt(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithMaxConns(1))
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	pg.MustExec(t, ctx, `SET plan_cache_mode = force_custom_plan`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('polls', '{}')`)
	reset := func() {
		t.Helper()
		pg.MustExec(t, ctx, `UPDATE outbox SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL`)
	}
	claim := func(poll bool) ([]string, error) {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000f1", Limit: 1, Lease: time.Minute, Poll: poll})
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		return ids, err
	}
	// The claim in turn and the poll have each run once on the connection.
	for _, poll := range []bool{false, true} {
		if ids, err := claim(poll); err != nil || len(ids) != 1 {
			t.Fatalf("claim (poll %v) before the change: %v, %v", poll, ids, err)
		}
		reset()
	}
	// Each statement that vanished fails once: after DISCARD ALL a poll
	// can fail twice, once for its try of the turn and once for the claim.
	for _, c := range []struct {
		what, change string
		polls        int // failures allowed to the polls
	}{
		{"the column changed type", `ALTER TABLE outbox ALTER COLUMN topic TYPE varchar(300)`, 1},
		{"the prepared statements vanished", `DISCARD ALL`, 2},
	} {
		pg.MustExec(t, ctx, c.change)
		pg.MustExec(t, ctx, `SET plan_cache_mode = force_custom_plan`)
		// The poll first, then the claim in turn beside it.
		for _, poll := range []bool{true, false} {
			failed := 0
			for {
				ids, err := claim(poll)
				if errors.Is(err, dialect.ErrClaimTurnBusy) {
					t.Fatal("the poll found the claim turn busy with no other claimer")
				}
				if err == nil && len(ids) == 1 {
					break
				}
				if failed++; failed > 1 && (!poll || failed > c.polls) {
					t.Fatalf("claim (poll %v) %d after %s: %v, %v; want at most one failure", poll, failed, c.what, ids, err)
				}
			}
			reset()
		}
	}
}

// TestTurnClaimReadsPastNotices: notices the server sends in the middle of
// the claim's replies (here a trigger's RAISE NOTICE for every claimed row)
// are passed over; every row is decoded and the connection stays usable.
func TestTurnClaimReadsPastNotices(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithMaxConns(1))
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) SELECT 'notices', '{}' FROM generate_series(1, 5)`)
	pg.MustExec(t, ctx, `CREATE FUNCTION notice_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE NOTICE 'claiming %', NEW.id; RETURN NEW; END $$`)
	pg.MustExec(t, ctx, `CREATE TRIGGER notice_claim BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION notice_claim()`)
	for _, want := range []int{3, 2, 0} {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000f2", Limit: 3, Lease: time.Minute})
		if err != nil || len(msgs) != want {
			t.Fatalf("claim beside notices: %d rows, %v; want %d", len(msgs), err, want)
		}
		for _, m := range msgs {
			if m.Topic != "notices" || string(m.Payload) != "{}" || m.ID == "" {
				t.Errorf("claimed row decoded as %+v", m)
			}
		}
	}
}

// TestTurnClaimTurnErrorIsTheTurns: when the wait for the claim turn itself
// fails (here the session's lock_timeout), the claim reports the turn's
// error under its own name, claims nothing, and its connection serves the
// next claim.
func TestTurnClaimTurnErrorIsTheTurns(t *testing.T) {
	pg, ctx, d, holder := oneRowTurnHeld(t)
	// The pool's other connection, the one the claim gets.
	pg.MustExec(t, ctx, `SET lock_timeout = '100ms'`)
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-000000000101", Limit: 10, Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "postgres: claim turn:") || !strings.Contains(err.Error(), "lock timeout") || len(msgs) != 0 {
		t.Fatalf("claim whose wait for the turn timed out: %d rows, %v; want the turn's lock timeout", len(msgs), err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err = d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-000000000102", Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("claim after the turn's error: %d rows, %v; want the row", len(msgs), err)
	}
}

// TestLeaseStartsAfterTheTurnWait: a claim that waited for the claim turn
// gets its whole lease from the moment it claims. now() is the start of the
// claim's transaction, before the wait, so a lease of now() + lease lost the
// wait: a claim that waited most of a lease for the turn held its rows for
// the rest only, and they could be reclaimed while the first relay was
// still publishing them.
func TestLeaseStartsAfterTheTurnWait(t *testing.T) {
	pg, ctx, d, holder := oneRowTurnHeld(t)
	const wait, lease = 2 * time.Second, 10 * time.Second
	done := make(chan error, 1)
	go func() {
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000c1", Limit: 10, Lease: lease})
		if err == nil && len(msgs) != 1 {
			err = errors.New("the claim took no row")
		}
		done <- err
	}()
	time.Sleep(wait) // the claim waits for the turn meanwhile
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The lease left at least lease − (time since the claim) − a margin:
	// measured against the database clock, not the claim's transaction
	// start.
	var secs float64
	if err := pg.Pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp())::float8 FROM outbox`).Scan(&secs); err != nil {
		t.Fatal(err)
	}
	left := time.Duration(secs * float64(time.Second))
	if left < lease-wait/2 {
		t.Errorf("lease left right after the claim: %v of %v; the %v waited for the turn came off it", left, lease, wait)
	}
}

// TestBusyPollsLeaveTheConnectionReady: a poll that finds the claim turn
// held returns dialect.ErrClaimTurnBusy, claims nothing and leaves its
// connection idle, not in a transaction; once the turn is free, a poll
// claims the rows. The pool holds two connections: the holder's and the
// one every busy poll runs on (its backend pid shows it is the same one
// throughout).
func TestBusyPollsLeaveTheConnectionReady(t *testing.T) {
	pg, ctx, d, holder := oneRowTurnHeld(t)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns', '{}')`)
	poll := func() ([]outbox.Message, error) {
		return d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000d1", Limit: 10, Lease: time.Minute, Poll: true})
	}
	pid := func() int { return backendPID(t, ctx, pg.Pool) }
	first := pid()
	for i := range 3 {
		msgs, err := poll()
		if !errors.Is(err, dialect.ErrClaimTurnBusy) || len(msgs) != 0 {
			t.Fatalf("poll %d while the turn is held: %d rows, %v; want dialect.ErrClaimTurnBusy", i, len(msgs), err)
		}
		// Seen from the holder's connection, the poll's backend is idle,
		// not idle in transaction.
		var state string
		if err := holder.QueryRow(ctx, `SELECT state FROM pg_stat_activity WHERE pid = $1`, first).Scan(&state); err != nil || state != "idle" {
			t.Fatalf("after busy poll %d the poll's backend is %q (%v); want idle", i, state, err)
		}
		if p := pid(); p != first {
			t.Fatalf("busy poll %d replaced the connection (backend %d, was %d)", i, p, first)
		}
	}
	var processing int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state <> 'pending'`).Scan(&processing); err != nil || processing != 0 {
		t.Fatalf("%d rows left pending after busy polls (%v); want all", processing, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := poll()
	if err != nil || len(msgs) != 2 {
		t.Fatalf("poll once the turn is free: %d rows, %v; want both", len(msgs), err)
	}
	var held int
	if err := pg.Pool.QueryRow(ctx, strings.Replace(turnWaiters, "AND NOT granted", "", 1), claimTurnSpace).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d turn locks held after the poll committed (%v)", held, err)
	}
}

// TestTurnClaimReportsQueueing: a claim that finds the table's claim turn
// held by another claim reports that it queued for it; one that finds it
// free reports that it did not (dialect.ClaimTurnReporter). The engine
// claims with fewer workers while most claims queue (relay/share.go).
func TestTurnClaimReportsQueueing(t *testing.T) {
	pg, ctx, d, holder := oneRowTurnHeld(t)
	reports := make(chan bool, 4)
	var reporter dialect.ClaimTurnReporter = d
	reporter.OnClaimTurn(func(q bool) { reports <- q })
	claimed := claimBehind(t, ctx, d, holder, "6f1c1a5e-0000-4000-8000-0000000000f1")
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	if q := <-reports; !q {
		t.Error("a claim that waited for the turn reported that it did not queue")
	}

	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('turns', '{}')`)
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000f2", Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(msgs))
	}
	if q := <-reports; q {
		t.Error("a claim that found the turn free reported that it queued")
	}
	// A poll tries the turn and skips when it is busy: it never queues,
	// and reports nothing.
	if _, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000f3", Limit: 10, Lease: time.Minute, Poll: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-reports:
		t.Errorf("a poll reported queued=%v", q)
	default:
	}
}
