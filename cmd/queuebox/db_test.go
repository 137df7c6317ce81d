package main

import (
	"context"
	"testing"
	"time"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestRelayConnectionSettings: `run` opens its pool with
// database.synchronousCommit (off by default), a plan for each execution
// (postgres.PlanEachExecution) and no JIT (postgres.NoJIT); the operator
// commands keep the server's settings.
func TestRelayConnectionSettings(t *testing.T) {
	ctx, cfg, _ := dbTestConfig(t)
	query := func(forRelay bool, sql string) string {
		pool, err := openPostgresFor(ctx, cfg, forRelay)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var v string
		if err := pool.QueryRow(ctx, sql).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	show := func(forRelay bool, setting string) string { return query(forRelay, "SHOW "+setting) }
	if got := show(true, "synchronous_commit"); got != "off" {
		t.Fatalf("relay connection: synchronous_commit = %q, want the default off", got)
	}
	if got := show(false, "synchronous_commit"); got != "on" {
		t.Fatalf("operator connection: synchronous_commit = %q, want the server's on", got)
	}
	if got := show(true, "plan_cache_mode"); got != "force_custom_plan" {
		t.Fatalf("relay connection: plan_cache_mode = %q, want force_custom_plan", got)
	}
	if got := show(false, "plan_cache_mode"); got != "auto" {
		t.Fatalf("operator connection: plan_cache_mode = %q, want the server's auto", got)
	}
	if got := show(true, "jit"); got != "off" {
		t.Fatalf("relay connection: jit = %q, want off", got)
	}
	// The operator's connection sends no jit of its own: the server's
	// setting (from its default or its configuration) applies.
	source := func(forRelay bool) string {
		return query(forRelay, "SELECT source FROM pg_settings WHERE name = 'jit'")
	}
	if got := source(true); got != "client" {
		t.Fatalf("relay connection: jit comes from %q, want client", got)
	}
	if got := source(false); got == "client" {
		t.Fatal("operator connection: jit was sent by the client, want the server's")
	}
	cfg.Database.SynchronousCommit = "on"
	if got := show(true, "synchronous_commit"); got != "on" {
		t.Fatalf("relay connection with synchronousCommit: on: got %q", got)
	}
}

// TestRunClaimFollowsTheIDIndex: with a unique index on the id (the bundled
// table's primary key) the claim's UPDATE does not repeat the head-of-key
// probe (postgres.WithUniqueID); on a table whose id no index keeps unique
// it does.
func TestRunClaimFollowsTheIDIndex(t *testing.T) {
	ctx, cfg, pg := dbTestConfig(t)
	uniqueID := func() bool {
		t.Helper()
		db, err := openDialectFor(ctx, cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, ok := db.Dialect.(*postgres.Dialect)
		if !ok {
			t.Fatalf("dialect %T, want the lease-mode *postgres.Dialect", db.Dialect)
		}
		return d.UniqueID()
	}
	if !uniqueID() {
		t.Error("the bundled table (primary key on id): the claim repeats the head-of-key probe")
	}
	pg.MustExec(t, ctx, `ALTER TABLE outbox DROP CONSTRAINT outbox_pkey`)
	if uniqueID() {
		t.Error("an id without a unique index: the claim does not repeat the head-of-key probe")
	}
}

// dbTestConfig is the default config on the test's own schema, with a
// context that ends with the test (20 s at most).
func dbTestConfig(t *testing.T) (context.Context, *config.Config, *testenv.PG) {
	t.Helper()
	pg := testenv.Postgres(t)
	cfg := config.Default()
	cfg.Database.URL = pg.URL
	return testenv.Context(t, 20*time.Second), cfg, pg
}
