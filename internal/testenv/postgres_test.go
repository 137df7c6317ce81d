package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/internal/testenv"
)

func TestPostgresSchemaAndURL(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)

	var sp string
	if err := pg.Pool.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil {
		t.Fatal(err)
	}
	if sp != pg.Schema {
		t.Fatalf("pool search_path = %q, want %q", sp, pg.Schema)
	}
	if !strings.Contains(pg.URL, "options=") {
		t.Fatalf("URL %q carries no options", pg.URL)
	}
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil {
		t.Fatal(err)
	}
	if sp != pg.Schema {
		t.Fatalf("URL search_path = %q, want %q", sp, pg.Schema)
	}
	// The migrations created the table in the test's schema.
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatalf("outbox table not reachable through the URL: %v", err)
	}
	var id string
	if err := conn.QueryRow(ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatalf("insert with topic and payload only: %v", err)
	}
}

func TestPostgresWithoutMigrations(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	ctx := testenv.Context(t, 30*time.Second)
	var reg *string
	if err := pg.Pool.QueryRow(ctx, "SELECT to_regclass('outbox')::text").Scan(&reg); err != nil {
		t.Fatal(err)
	}
	if reg != nil {
		t.Fatalf("outbox exists without migrations: %s", *reg)
	}
}
