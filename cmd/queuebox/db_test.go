package main

import (
	"context"
	"testing"
	"time"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestRelayConnectionSettings: `run` opens its pool with
// database.synchronousCommit (off by default) and a plan for each execution
// (postgres.PlanEachExecution); the operator commands keep the server's
// settings.
func TestRelayConnectionSettings(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.Database.URL = pg.URL
	show := func(forRelay bool, setting string) string {
		pool, err := openPostgresFor(ctx, cfg, forRelay)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var v string
		if err := pool.QueryRow(ctx, "SHOW "+setting).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
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
	cfg.Database.SynchronousCommit = "on"
	if got := show(true, "synchronous_commit"); got != "on" {
		t.Fatalf("relay connection with synchronousCommit: on: got %q", got)
	}
}
