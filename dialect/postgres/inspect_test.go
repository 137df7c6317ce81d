package postgres

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
)

// TestTopicRegexpMatchesRouter checks the SQL translation of topic patterns
// against the router on a set of topics (Go's RE2 reads these expressions
// the same way PostgreSQL's AREs do).
func TestTopicRegexpMatchesRouter(t *testing.T) {
	patterns := []string{"**", "*", "order.*", "order.**", "*.created", "order.*.paid", "a+b.(c)", `x\y.**`, "o.r[d]$.*"}
	topics := []string{"order", "order.", "order.created", "order.eu.paid", "orderXcreated", "order.created.x", "a+b.(c)", "aab.c",
		`x\y.z`, "x.y.z", "o.r[d]$.q", "o.rd.q", "invoice.created", "ü.created"}
	for _, p := range patterns {
		re, err := topicRegexp(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		rx := regexp.MustCompile(re)
		rp := address.MustParsePattern(p)
		for _, topic := range topics {
			if got, want := rx.MatchString(topic), rp.Match(topic); got != want {
				t.Errorf("pattern %q (%s), topic %q: regexp %v, router %v", p, re, topic, got, want)
			}
		}
	}
	for _, bad := range []string{"", "a..b", ".a", "a.**.b", "ord*"} {
		if _, err := topicRegexp(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRetentionOnPostgres runs relay.RetentionPass against the real table:
// 2,500 old sent rows go in three statements; pending, processing, new and
// dead rows stay.
func TestRetentionOnPostgres(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	d := newDialect(t, pg.Pool)
	_, err := pg.Pool.Exec(ctx, `
		INSERT INTO outbox (topic, payload, state, scheduled_at, updated_at)
		SELECT 't', '{}', s.state, now() - interval '3 days', now() - interval '2 days'
		FROM (SELECT CASE WHEN g <= 2500 THEN 'sent' WHEN g <= 2510 THEN 'pending' WHEN g <= 2520 THEN 'processing' ELSE 'dead' END AS state
		      FROM generate_series(1, 2530) AS g) AS s;
		INSERT INTO outbox (topic, payload, state) SELECT 't', '{}', 'sent' FROM generate_series(1, 10)`)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	counting := purgerFunc(func(p dialect.PurgeParams) (int64, error) {
		calls++
		return d.Purge(ctx, p)
	})
	n, err := relay.RetentionPass(ctx, counting, relay.RetentionOptions{BatchSize: 1000, Pause: time.Millisecond}, "sent", 24*time.Hour)
	if err != nil || n != 2500 {
		t.Fatalf("retention pass = %d, %v; want 2500", n, err)
	}
	if calls != 3 {
		t.Errorf("%d delete statements, want 3", calls)
	}
	rows, err := pg.Pool.Query(ctx, `SELECT state, count(*) FROM outbox GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int64{}
	for rows.Next() {
		var s string
		var c int64
		if err := rows.Scan(&s, &c); err != nil {
			t.Fatal(err)
		}
		left[s] = c
	}
	want := map[string]int64{"sent": 10, "pending": 10, "processing": 10, "dead": 10}
	for s, c := range want {
		if left[s] != c {
			t.Errorf("%s rows left: %d, want %d (%v)", s, left[s], c, left)
		}
	}
}

type purgerFunc func(dialect.PurgeParams) (int64, error)

func (f purgerFunc) Purge(_ context.Context, p dialect.PurgeParams) (int64, error) { return f(p) }

// TestTimeBoundsNeedUpdatedAt: on a table without an updatedAt column, a
// replay or dead list bounded by time is refused. The replay's selection
// used to drop the bound and match every row: replay --state sent --since
// 1s moved the whole sent history back to pending.
func TestTimeBoundsNeedUpdatedAt(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	pg.MustExec(t, ctx, `ALTER TABLE outbox DROP COLUMN updated_at`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload, state) SELECT 't', '{}', 'sent' FROM generate_series(1, 3)`)
	m, err := dialect.DefaultMapping().Without(dialect.ColUpdatedAt)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(pg.Pool, m)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second)
	for _, p := range []dialect.ReplayParams{
		{State: "sent", Since: since},
		{State: "sent", Until: since},
		{State: "sent", Since: since, DryRun: true},
	} {
		n, err := d.Replay(ctx, p)
		if err == nil || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "updatedAt") {
			t.Errorf("Replay(%+v) = %+v, %v; want a permanent error naming updatedAt", p, n, err)
		}
	}
	if _, err := d.DeadList(ctx, dialect.DeadListParams{Since: since}); err == nil || !strings.Contains(err.Error(), "updatedAt") {
		t.Errorf("DeadList with since = %v; want an error naming updatedAt", err)
	}
	var sent int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if sent != 3 {
		t.Fatalf("%d of 3 sent rows left sent after the refused replays", sent)
	}
	// Other selectors still work on such a table, and so does the claim
	// (its statement named updated_at unconditionally, so a lease-mode table
	// without the column could not start).
	if n, err := d.Replay(ctx, dialect.ReplayParams{State: "sent", TopicPattern: "t"}); err != nil || n != (dialect.ReplayResult{Selected: 3, Moved: 3}) {
		t.Fatalf("Replay by topic = %+v, %v; want 3 selected and moved", n, err)
	}
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-0000000000d1", Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("Claim on a table without updated_at = %d rows, %v; want 3", len(msgs), err)
	}
}

// TestUnmappedStatesGivesUpInTime: the unmapped-state count reads the whole
// table, so check bounds it; a table it cannot read in time (here, locked by
// a migration) is reported as not compared (ok false, no error), and
// counted once it can be read.
func TestUnmappedStatesGivesUpInTime(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload, state) VALUES ('t', '{}', 'pending'), ('t', '{}', 'archived')`)
	d, err := New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	lock, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Also on a failure below: a lock left held would keep the schema's
	// drop waiting.
	t.Cleanup(func() { _ = lock.Rollback(context.WithoutCancel(ctx)) })
	if _, err := lock.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// Without the bound the count would wait for the lock until the
	// test's context ends, and fail with that error.
	values, ok, err := d.UnmappedStates(ctx, 200*time.Millisecond)
	if err != nil || ok || values != nil {
		t.Fatalf("UnmappedStates on a locked table = %v, %v, %v; want nil, false, nil", values, ok, err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	values, ok, err = d.UnmappedStates(ctx, 5*time.Second)
	if err != nil || !ok || len(values) != 1 || values[0].Value != "archived" || values[0].Rows != 1 {
		t.Fatalf("UnmappedStates = %+v, %v, %v; want one archived row", values, ok, err)
	}
}

// TestReplayPlanWithoutStatistics: on a table of 200,000 dead rows that was
// never analyzed (autovacuum off), a replay batch reaches its rows by the
// primary key, in the plan made for its parameters and in a generic one,
// and reads buffers in proportion to the batch, not to the dead rows: a
// plan that walks the finished rows' index for every batch makes a replay
// of them all take an hour.
func TestReplayPlanWithoutStatistics(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 120*time.Second)
	d := newDialect(t, pg.Pool)
	pg.MustExec(t, ctx, `ALTER TABLE outbox SET (autovacuum_enabled = false)`)
	pg.MustExec(t, ctx, `
		INSERT INTO outbox (topic, key, payload, state, attempt, last_error)
		SELECT 'order.created', CASE WHEN g % 10 = 0 THEN NULL ELSE 'k' || (g % 5000) END, '{}', 'dead', 5, 'http 500'
		FROM generate_series(1, 200000) AS g;
		INSERT INTO outbox (topic, key, payload, state, claimed_at, lease_expires_at, claim_token)
		SELECT 'order.created', 'busy' || g, '{}', 'processing', now(), now() + interval '1 minute', gen_random_uuid()
		FROM generate_series(1, 20) AS g`)
	var reltuples float64
	if err := pg.Pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'outbox'::regclass`).Scan(&reltuples); err != nil {
		t.Fatal(err)
	}
	if reltuples >= 0 {
		t.Fatalf("the table has statistics (reltuples %v): the test needs a never-analyzed table", reltuples)
	}
	var ids []string
	if err := pg.Pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM (SELECT id FROM outbox WHERE state = 'dead' ORDER BY sequence DESC LIMIT 500) AS s`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	query := d.queries["replay"]
	idList := regexp.MustCompile(`'\{[^}]*\}'`)
	checkPlan := func(what, plan string) {
		t.Helper()
		if !strings.Contains(plan, "on outbox_pkey") && !strings.Contains(plan, "using outbox_pkey") || strings.Contains(plan, "outbox_finished_idx") {
			t.Errorf("%s plan of a replay batch does not reach its rows by the primary key:\n%s", what, idList.ReplaceAllString(plan, "'{…}'"))
		}
	}
	checkPlan("custom", explainPlan(t, ctx, pg.Pool, query, "dead", ids))

	conn, err := pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, stmt := range []string{"SET plan_cache_mode = force_generic_plan", "PREPARE replay_batch(text, text[]) AS " + query} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE replay_batch; RESET plan_cache_mode") }()
	// EXECUTE takes no parameters of the outer statement: the ids as a
	// literal (UUIDs need no quoting inside it).
	checkPlan("generic", explainPlan(t, ctx, conn, "EXECUTE replay_batch('dead', '{"+strings.Join(ids, ",")+"}')"))

	// Run it, rolled back: the rows it looks at to find its batch.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var doc []struct{ Plan planNode }
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query, "dead", ids).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	if examined := doc[0].Plan.examined("o"); examined == 0 || examined > int64(len(ids)) {
		t.Errorf("a batch of %d ids looked at %d rows of the table", len(ids), examined)
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Alias         string     `json:"Alias"`
	ActualRows    int64      `json:"Actual Rows"`
	ActualLoops   int64      `json:"Actual Loops"`
	FilterRemoved int64      `json:"Rows Removed by Filter"`
	RecheckRemove int64      `json:"Rows Removed by Index Recheck"`
	Plans         []planNode `json:"Plans"`
}

// examined is the rows the nodes of alias returned or removed.
func (n planNode) examined(alias string) int64 {
	var sum int64
	if n.Alias == alias { // the scans of alias, and the Update node, which returns nothing
		sum += (n.ActualRows + n.FilterRemoved + n.RecheckRemove) * max(n.ActualLoops, 1)
	}
	for _, c := range n.Plans {
		sum += c.examined(alias)
	}
	return sum
}
