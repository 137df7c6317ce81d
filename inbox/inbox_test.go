package inbox_test

import (
	"database/sql"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testenv"
)

// migrated returns a test schema with both the outbox and the inbox
// migrated, and a database/sql handle on it.
func migrated(t *testing.T) (*testenv.PG, *sql.DB) {
	t.Helper()
	pg := testenv.Postgres(t)
	db := stdlib.OpenDBFromPool(pg.Pool)
	t.Cleanup(func() { db.Close() })
	ctx := testenv.Context(t, 30*time.Second)
	if err := inbox.Migrate(ctx, db, inbox.PostgreSQL); err != nil {
		t.Fatal(err)
	}
	// Idempotent, and beside the outbox's own goose table.
	if err := inbox.Migrate(ctx, db, inbox.PostgreSQL); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('queuebox_inbox', 'queuebox_inbox_version', 'outbox')`, pg.Schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 3 {
		t.Fatalf("%d of the 3 tables in %s", tables, pg.Schema)
	}
	return pg, db
}

func TestRecordPgx(t *testing.T) {
	t.Parallel()
	pg, _ := migrated(t)
	ctx := testenv.Context(t, 30*time.Second)
	ib, err := inbox.New()
	if err != nil {
		t.Fatal(err)
	}
	record := func(group, id string) bool {
		t.Helper()
		tx, err := pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		isNew, err := ib.RecordPgx(ctx, tx, group, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return isNew
	}
	if !record("billing", "m-1") {
		t.Error("first Record: not new")
	}
	if record("billing", "m-1") {
		t.Error("second Record: new")
	}
	if !record("shipping", "m-1") {
		t.Error("another group: not new")
	}

	// A rolled-back transaction forgets the id.
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if isNew, err := ib.RecordPgx(ctx, tx, "billing", "m-2"); err != nil || !isNew {
		t.Fatalf("m-2: %v %v", isNew, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !record("billing", "m-2") {
		t.Error("after rollback: not new")
	}

	for _, c := range []struct{ group, id string }{{"", "x"}, {"g", ""}, {"g", strings.Repeat("x", 256)}} {
		if _, err := ib.RecordPgx(ctx, nil, c.group, c.id); !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("Record(%q, %q): %v", c.group, c.id, err)
		}
	}
}

func TestRecordConcurrent(t *testing.T) {
	t.Parallel()
	pg, db := migrated(t)
	ctx := testenv.Context(t, 30*time.Second)
	ib, _ := inbox.New()

	const n = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		news  int
		errs  []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var isNew bool
			var err error
			if i%2 == 0 { // half through pgx, half through database/sql
				tx, e := pg.Pool.Begin(ctx)
				if e != nil {
					err = e
				} else if isNew, err = ib.RecordPgx(ctx, tx, "g", "same-id"); err == nil {
					err = tx.Commit(ctx)
				}
			} else {
				tx, e := db.BeginTx(ctx, nil)
				if e != nil {
					err = e
				} else if isNew, err = ib.RecordSQL(ctx, tx, "g", "same-id"); err == nil {
					err = tx.Commit()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if isNew {
				news++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if news != 1 {
		t.Errorf("%d of %d concurrent Records said new, want exactly 1", news, n)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	pg, db := migrated(t)
	ctx := testenv.Context(t, 30*time.Second)
	ib, _ := inbox.New()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		for _, g := range []string{"old", "other"} {
			if _, err := ib.RecordPgx(ctx, tx, g, "m-"+string(rune('a'+i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Five of group old processed two hours ago, two just now; group other
	// all two hours ago.
	pg.MustExec(t, ctx, `UPDATE queuebox_inbox SET processed_at = now() - interval '2 hours' WHERE consumer_group = 'other' OR message_id < 'm-f'`)
	n, err := ib.Purge(ctx, db, "old", time.Hour, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("purged %d, want 5", n)
	}
	var left map[string]int = map[string]int{}
	rows, err := pg.Pool.Query(ctx, `SELECT consumer_group, count(*) FROM queuebox_inbox GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		var c int
		if err := rows.Scan(&g, &c); err != nil {
			t.Fatal(err)
		}
		left[g] = c
	}
	if left["old"] != 2 || left["other"] != 7 {
		t.Errorf("left %v, want old 2 other 7", left)
	}
	if n, err := ib.Purge(ctx, db, "old", time.Hour, 2); err != nil || n != 0 {
		t.Errorf("second purge: %d %v", n, err)
	}
	if _, err := ib.Purge(ctx, db, "", time.Hour, 2); !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("empty group: %v", err)
	}
}

func TestSQLServerStatements(t *testing.T) {
	ib, err := inbox.New(inbox.WithDialect(inbox.SQLServer), inbox.WithTable("dbo.queuebox_inbox"))
	if err != nil {
		t.Fatal(err)
	}
	record, purge := ib.Statements()
	const wantRecord = `INSERT INTO [dbo].[queuebox_inbox] (consumer_group, message_id)
SELECT @p1, @p2
WHERE NOT EXISTS (
    SELECT 1 FROM [dbo].[queuebox_inbox] WITH (UPDLOCK, HOLDLOCK)
    WHERE consumer_group = @p1 AND message_id = @p2)`
	const wantPurge = `DELETE TOP (@p3) FROM [dbo].[queuebox_inbox]
WHERE consumer_group = @p1
  AND processed_at < DATEADD(second, -@p2, SYSUTCDATETIME())`
	if record != wantRecord {
		t.Errorf("record:\n%s", record)
	}
	if purge != wantPurge {
		t.Errorf("purge:\n%s", purge)
	}
	fsys, err := inbox.Migrations(inbox.SQLServer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Open("00001_create_inbox.sql"); err != nil {
		t.Error(err)
	}
	if _, err := inbox.New(inbox.WithTable("a;drop table x")); err == nil {
		t.Error("bad table accepted")
	}
}

func TestFromHTTP(t *testing.T) {
	r := httptest.NewRequest("POST", "/hooks/x", nil)
	if _, ok := inbox.FromHTTP(r); ok {
		t.Error("id without headers")
	}
	r.Header.Set("Idempotency-Key", "k-1")
	if id, ok := inbox.FromHTTP(r); !ok || id != "k-1" {
		t.Errorf("Idempotency-Key: %q %v", id, ok)
	}
	r.Header.Set("X-Message-Id", "m-1")
	if id, ok := inbox.FromHTTP(r); !ok || id != "m-1" {
		t.Errorf("X-Message-Id first: %q %v", id, ok)
	}
}
