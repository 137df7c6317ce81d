package main

import (
	"context"
	"testing"
	"time"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestRelayConnectionsCommitAsynchronously: `run` opens its pool with
// database.synchronousCommit (off by default); the operator commands keep
// the server's setting.
func TestRelayConnectionsCommitAsynchronously(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.Database.URL = pg.URL
	show := func(forRelay bool) string {
		pool, err := openPostgresFor(ctx, cfg, forRelay)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var v string
		if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := show(true); got != "off" {
		t.Fatalf("relay connection: synchronous_commit = %q, want the default off", got)
	}
	if got := show(false); got != "on" {
		t.Fatalf("operator connection: synchronous_commit = %q, want the server's on", got)
	}
	cfg.Database.SynchronousCommit = "on"
	if got := show(true); got != "on" {
		t.Fatalf("relay connection with synchronousCommit: on: got %q", got)
	}
}
