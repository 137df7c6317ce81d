package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/migrations"
)

// TestInboxSQLServerText checks the SQL Server inbox migration as text (no
// SQL Server runs here): the columns of the PostgreSQL table, UTC times
// from the database clock, the bracketed key, the unique pair.
func TestInboxSQLServerText(t *testing.T) {
	fsys, err := migrations.InboxFS("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "00001_create_inbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{
		"-- +goose Up", "-- +goose Down", "CREATE TABLE inbox", "source           NVARCHAR(255)    NOT NULL",
		"idempotency_key  NVARCHAR(255)    NOT NULL", "[key]            NVARCHAR(255)    NULL", "held_at",
		"CONSTRAINT inbox_source_idempotency_key UNIQUE (source, idempotency_key)", "DEFAULT SYSUTCDATETIME()",
		"NEXT VALUE FOR inbox_sequence_seq", "WHERE state = N'pending'", "WHERE state IN (N'sent', N'dead')",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("sqlserver inbox migration lacks %q", want)
		}
	}
	code := stripComments(src)
	for _, bad := range []string{"GETDATE", "SYSDATETIME()", "now()", " key ", "(key"} {
		if strings.Contains(code, bad) {
			t.Errorf("sqlserver inbox migration contains %q outside comments", bad)
		}
	}
}

// TestInboxPostgres applies the inbox migration beside the outbox's, in
// its own version table, goes down and up again, and checks the unique
// pair and the outbox's columns.
func TestInboxPostgres(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := stdlib.OpenDBFromPool(pg.Pool)
	defer db.Close()
	p, err := migrations.NewInboxProvider("postgresql", db)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := p.Up(ctx); return err },
		func(ctx context.Context) error { _, err := p.DownTo(ctx, 0); return err },
		func(ctx context.Context) error { _, err := p.Up(ctx); return err },
	} {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var missing []string
	rows, err := pg.Pool.Query(ctx, `SELECT o.column_name FROM information_schema.columns o
		WHERE o.table_schema = $1 AND o.table_name = 'outbox' AND o.column_name <> 'aggregate_type'
		  AND NOT EXISTS (SELECT 1 FROM information_schema.columns i
		      WHERE i.table_schema = o.table_schema AND i.table_name = 'inbox' AND i.column_name = o.column_name AND i.data_type = o.data_type)`, pg.Schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		_ = rows.Scan(&c)
		missing = append(missing, c)
	}
	if len(missing) > 0 {
		t.Errorf("the inbox table lacks the outbox's columns %v", missing)
	}
	pg.MustExec(t, ctx, `INSERT INTO inbox (source, idempotency_key, topic, payload) VALUES ('a', 'k', 't', '{}'), ('b', 'k', 't', '{}')`)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO inbox (source, idempotency_key, topic, payload) VALUES ('a', 'k', 't', '{}')`); err == nil {
		t.Error("a second (source, idempotency_key) was stored")
	}
	var version int64
	if err := pg.Pool.QueryRow(ctx, `SELECT max(version_id) FROM `+migrations.InboxVersionTable).Scan(&version); err != nil || version != 1 {
		t.Errorf("inbox version %d (%v)", version, err)
	}
}
