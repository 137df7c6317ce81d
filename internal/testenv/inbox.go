package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/migrations"
)

// InboxPostgres is Postgres with the inbox table's migrations applied too.
func InboxPostgres(t testing.TB, opts ...PGOption) *PG {
	t.Helper()
	pg := Postgres(t, opts...)
	if pg == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := stdlib.OpenDBFromPool(pg.Pool)
	defer db.Close()
	p, err := migrations.NewInboxProvider("postgresql", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("inbox migrations: %v", err)
	}
	return pg
}
