package postgres

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestPlansFollowTheTable: the claim and the completion, prepared and run
// while the table is empty (and analyzed so, as autovacuum leaves an outbox
// that retention has emptied), then run again after a burst has filled it.
// On a connection set up with PlanEachExecution they are planned for the
// full table: index scans (which ones depends on the statistics, still
// those of the empty table here), the primary key for the completion. The
// control connection, with PostgreSQL's default plan cache, keeps the
// generic plans it made for the empty table, sequential scans included: for
// the claim a scan of the table for every candidate.
func TestPlansFollowTheTable(t *testing.T) {
	// A database of its own: the other packages' tests create and drop
	// schemas in the shared one, and each of those resets every session's
	// plan cache there, the control's included.
	pg := testenv.Postgres(t, testenv.WithOwnDatabase())
	ctx := testenv.Context(t, 90*time.Second)
	d := newDialect(t, pg.Pool)
	claim, err := d.claims.sql(claimShape{limit: 100, window: 1000})
	if err != nil {
		t.Fatal(err)
	}
	complete := d.queries["complete"]

	const token = "6f1c1a5e-0000-4000-8000-000000000001"
	connect := func(relay bool) *pgx.Conn {
		cc := pg.Pool.Config().ConnConfig.Copy()
		if relay {
			PlanEachExecution(cc)
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		for name, sql := range map[string]string{"claim": claim, "complete": complete} {
			if _, err := conn.Prepare(ctx, name, sql); err != nil {
				t.Fatalf("prepare %s: %v", name, err)
			}
		}
		// More executions than the five custom plans after which the
		// server may settle on a generic one.
		for i := 0; i < 8; i++ {
			if _, err := conn.Exec(ctx, "claim", token, int64(30e6), int64(math.MinInt64), []string{}); err != nil {
				t.Fatalf("claim on the empty table: %v", err)
			}
			if _, err := conn.Exec(ctx, "complete", token, []string{}); err != nil {
				t.Fatalf("complete on the empty table: %v", err)
			}
		}
		return conn
	}
	explain := func(conn *pgx.Conn, stmt string) string {
		t.Helper()
		return explainPlan(t, ctx, conn, "EXECUTE "+stmt)
	}
	claimStmt := "claim('" + token + "', 30000000, -9223372036854775808, '{}')"
	completeStmt := "complete('" + token + "', ARRAY['" + token + "'])"

	// The setup needs the control connection to keep its generic plan
	// until the end. Any invalidation (for example a reset of the server's
	// invalidation queue when the parallel tests create and drop schemas
	// faster than an idle session reads it) makes PostgreSQL plan it again
	// for the full table, and the control proves nothing. That is retried,
	// on a fresh, empty table and fresh connections.
	var relay *pgx.Conn
	var controlPlan string
	for attempt := 1; ; attempt++ {
		pg.MustExec(t, ctx, `TRUNCATE outbox`)
		pg.MustExec(t, ctx, `ANALYZE outbox`)
		var control *pgx.Conn
		relay, control = connect(true), connect(false)

		var mode string
		if err := relay.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "force_custom_plan" {
			t.Fatalf("relay connection: plan_cache_mode = %q (%v), want force_custom_plan", mode, err)
		}
		pg.MustExec(t, ctx, `
			INSERT INTO outbox (topic, key, payload, state)
			SELECT 'load', 'k' || (g % 200), jsonb_build_object('g', g),
			       CASE WHEN g <= 10000 THEN 'sent' ELSE 'pending' END
			FROM generate_series(1, 20000) AS g`)
		controlPlan = explain(control, claimStmt)
		if strings.Contains(controlPlan, "Seq Scan on outbox") {
			break
		}
		if attempt == 3 {
			t.Fatalf("setup: the control connection did not keep the empty table's claim plan in %d attempts; "+
				"if PostgreSQL now re-plans on growth, PlanEachExecution may no longer be needed:\n%s", attempt, controlPlan)
		}
		t.Logf("setup attempt %d: the control connection's plan was made again (an invalidation); retrying", attempt)
	}
	plan := explain(relay, claimStmt)
	if strings.Contains(plan, "Seq Scan on outbox") {
		t.Errorf("relay claim is not planned for the full table:\n%s", plan)
	}
	plan = explain(relay, completeStmt)
	if strings.Contains(plan, "Seq Scan on outbox") || !strings.Contains(plan, "outbox_pkey") {
		t.Errorf("relay completion is not planned for the full table:\n%s", plan)
	}
}

// TestPlanEachExecutionKeepsTheOperatorsChoice: a plan_cache_mode in the
// connection string, as a parameter or in options, is left as it is.
func TestPlanEachExecutionKeepsTheOperatorsChoice(t *testing.T) {
	for _, url := range []string{
		"postgres://u@h/db?plan_cache_mode=auto",
		"postgres://u@h/db?PLAN_CACHE_MODE=auto",
		"postgres://u@h/db?options=-c%20plan_cache_mode%3Dforce_generic_plan",
		"postgres://u@h/db?options=-c%20plan-cache-mode%3Dauto",
	} {
		cc := parseConnConfig(t, url)
		before := len(cc.RuntimeParams)
		PlanEachExecution(cc)
		if _, set := cc.RuntimeParams["plan_cache_mode"]; len(cc.RuntimeParams) != before || (set && !strings.Contains(url, "?plan_cache_mode")) {
			t.Errorf("%s: runtime parameters changed to %v", url, cc.RuntimeParams)
		}
	}
	cc := parseConnConfig(t, "postgres://u@h/db")
	if note := PlanCacheNote(cc); note != "" {
		t.Errorf("a URL without plan_cache_mode is noted: %s", note)
	}
	PlanEachExecution(cc)
	if got := cc.RuntimeParams["plan_cache_mode"]; got != "force_custom_plan" {
		t.Errorf("plan_cache_mode = %q, want force_custom_plan", got)
	}
	if note := PlanCacheNote(cc); note != "" {
		t.Errorf("the relay's own setting is noted: %s", note)
	}
}

// TestPlanCacheNote: `check` and the start log say when the connection
// string keeps PostgreSQL's plan cache, and name the mode it chose.
func TestPlanCacheNote(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://u@h/db?plan_cache_mode=auto":                                      "= auto",
		"postgres://u@h/db?options=-c%20plan-cache-mode%3Dforce_generic_plan":         "= force_generic_plan",
		"postgres://u@h/db?options=-c%20plan_cache_mode%3Dauto%20-c%20work_mem%3D8MB": "= auto",
		"postgres://u@h/db?plan_cache_mode=force_custom_plan":                         "",
		"postgres://u@h/db?options=-cplan_cache_mode%3Dauto":                          "= auto",
		"postgres://u@h/db?options=--plan-cache-mode%3Dauto":                          "= auto",
		// The last -c wins, as on the server.
		"postgres://u@h/db?options=-c%20plan_cache_mode%3Dauto%20-c%20plan_cache_mode%3Dforce_custom_plan": "",
		"postgres://u@h/db?options=-c%20plan_cache_mode%3Dforce_custom_plan%20-c%20plan_cache_mode%3Dauto": "= auto",
		"postgres://u@h/db?options=-c%20application_name%3Dplan_cache_mode":                                "",
	} {
		cc := parseConnConfig(t, url)
		note := PlanCacheNote(cc)
		if want == "" && note != "" || want != "" && !strings.Contains(note, want) {
			t.Errorf("%s: note %q, want one naming %s", url, note, want)
		}
	}
}

// TestRelayClaimsRunNoGenericPlan: on the relay's connections
// (PlanEachExecution) neither claim ever runs a kept generic plan. The
// lease claim is planned at each execution; the lock claim has no
// parameters, and a prepared statement without parameters keeps its first
// plan whatever plan_cache_mode says, so it is not prepared at all.
func TestRelayClaimsRunNoGenericPlan(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	cfg := pg.Pool.Config()
	cfg.MaxConns = 1 // pg_prepared_statements shows one session's statements
	PlanEachExecution(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	lease := newDialect(t, pool)
	lock, err := NewLockMode(pool, dialect.DefaultMapping(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lock.Close)
	p := dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-000000000001", Limit: 100, Lease: time.Minute, Window: 1000}
	for i := 0; i < 8; i++ {
		for name, d := range map[string]dialect.Dialect{"lease": lease, "lock": lock} {
			if msgs, err := d.Claim(ctx, p); err != nil || len(msgs) != 0 {
				t.Fatalf("%s claim on the empty table: %d rows, %v", name, len(msgs), err)
			}
		}
	}
	var generic, custom int64
	if err := pool.QueryRow(ctx, `SELECT COALESCE(sum(generic_plans), 0), COALESCE(sum(custom_plans), 0)
		FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE OF c SKIP LOCKED%'
		  AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic != 0 {
		t.Errorf("claims ran %d generic plans, want none", generic)
	}
	if custom < 8 {
		t.Errorf("the lease claim made %d custom plans, want one per execution (8)", custom)
	}
}

// TestNoJITKeepsTheOperatorsChoice: jit = off unless the connection string
// sets jit, as a parameter or in options.
func TestNoJITKeepsTheOperatorsChoice(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://u@h/db":                                     "off",
		"postgres://u@h/db?jit=on":                              "on",
		"postgres://u@h/db?JIT=on":                              "",
		"postgres://u@h/db?options=-c%20jit%3Don":               "",
		"postgres://u@h/db?options=-c%20work_mem%3D8MB":         "off",
		"postgres://u@h/db?options=-c%20application_name%3Djit": "off",
	} {
		cc := parseConnConfig(t, url)
		NoJIT(cc)
		if got := cc.RuntimeParams["jit"]; got != want {
			t.Errorf("%s: runtime parameter jit = %q, want %q (%v)", url, got, want, cc.RuntimeParams)
		}
	}
}

// parseConnConfig parses a connection string the tests above hand to the
// session settings.
func parseConnConfig(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}
