package migrations_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/migrations"
)

// TestPostgresIndexMigration applies the migrations up to 00002 on an empty
// schema, writes rows in every state, applies 00003 (the state-split
// indexes, built CONCURRENTLY outside a transaction), checks the index set
// and that the operator queries' indexes cover the rows they should, then
// goes down to 00002 and up again.
func TestPostgresIndexMigration(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := stdlib.OpenDBFromPool(pg.Pool)
	defer db.Close()
	p, err := migrations.NewProvider("postgresql", db, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatalf("up to 00002: %v", err)
	}
	pg.MustExec(t, ctx, `
		INSERT INTO outbox (topic, key, payload, state)
		SELECT 'orders.' || (g % 3), 'k' || (g % 7), '{}'::jsonb,
		       (ARRAY['pending', 'processing', 'sent', 'dead'])[1 + g % 4]
		FROM generate_series(1, 400) AS g;
		INSERT INTO outbox (topic, payload) SELECT 'unkeyed', '{}'::jsonb FROM generate_series(1, 40)`)
	before := indexDefs(ctx, t, pg)
	for _, name := range []string{"outbox_state_scheduled_idx", "outbox_topic_idx"} {
		if _, ok := before[name]; !ok {
			t.Fatalf("00002: no %s; indexes %v", name, slices.Sorted(maps.Keys(before)))
		}
	}

	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatalf("up to 00003: %v", err)
	}
	after := indexDefs(ctx, t, pg)
	want := map[string]string{
		"outbox_pending_scheduled_idx": "(state, scheduled_at) WHERE ((state)::text = 'pending'::text)",
		"outbox_pending_topic_idx":     "(topic) WHERE ((state)::text = 'pending'::text)",
		"outbox_finished_idx":          "(state, updated_at) WHERE ((state)::text = ANY ((ARRAY['sent'::character varying, 'dead'::character varying])::text[]))",
		"outbox_key_sequence_idx":      "(key, sequence) WHERE (((state)::text = ANY ((ARRAY['pending'::character varying, 'processing'::character varying])::text[])) AND (key IS NOT NULL))",
	}
	for name, def := range want {
		if !strings.HasSuffix(after[name], def) {
			t.Errorf("%s = %q, want ... %s", name, after[name], def)
		}
	}
	for _, gone := range []string{"outbox_state_scheduled_idx", "outbox_topic_idx", "outbox_key_head_idx"} {
		if _, ok := after[gone]; ok {
			t.Errorf("%s still there after 00003", gone)
		}
	}
	// The claim's and the reaper's indexes are untouched.
	for _, kept := range []string{"outbox_pkey", "outbox_claim_idx", "outbox_processing_idx", "outbox_held_key_idx"} {
		if after[kept] != before[kept] {
			t.Errorf("%s changed: %q -> %q", kept, before[kept], after[kept])
		}
	}
	// Each index holds exactly its state's rows (100 keyed rows of each state
	// and 40 pending rows without a key): the
	// predicates say what they should. Counted through the index itself.
	for _, c := range []struct {
		index, where string
		want         int
	}{
		{"outbox_pending_scheduled_idx", "state = 'pending' AND scheduled_at <= now() + interval '1 hour'", 140},
		{"outbox_pending_topic_idx", "state = 'pending' AND topic = 'orders.1'", 34},
		{"outbox_finished_idx", "state = 'dead' AND updated_at <= now() + interval '1 hour'", 100},
		{"outbox_finished_idx", "state = 'sent' AND updated_at <= now() + interval '1 hour'", 100},
		// The head-of-key probe's shape: a key equality proves key IS NOT NULL.
		{"outbox_key_sequence_idx", "key = 'k3' AND state IN ('pending', 'processing') AND sequence <= 1000", 28},
		// Rows without a key are not in it: 200 keyed pending or processing
		// rows, and the 40 unkeyed pending ones are left out.
		{"outbox_key_sequence_idx", "key IS NOT NULL AND state IN ('pending', 'processing')", 200},
	} {
		if got := countVia(ctx, t, pg, c.index, c.where); got != c.want {
			t.Errorf("%s, %s: %d rows, want %d", c.index, c.where, got, c.want)
		}
	}

	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatalf("down to 00002: %v", err)
	}
	if got := indexDefs(ctx, t, pg); !maps.Equal(got, before) {
		t.Errorf("down to 00002 did not restore the index set:\n got %v\nwant %v", got, before)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := indexDefs(ctx, t, pg); !maps.Equal(got, after) {
		t.Errorf("up again: index set %v, want %v", got, after)
	}
}

func indexDefs(ctx context.Context, t *testing.T, pg *testenv.PG) map[string]string {
	t.Helper()
	rows, err := pg.Pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox'`, pg.Schema)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return defs
}

// countVia counts the rows matching where with the planner steered to
// index (sequential and bitmap scans off) and checks that the plan used it.
func countVia(ctx context.Context, t *testing.T, pg *testenv.PG, index, where string) int {
	t.Helper()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	q := "SELECT count(*) FROM outbox WHERE " + where
	var plan strings.Builder
	rows, err := tx.Query(ctx, "EXPLAIN "+q)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if !strings.Contains(plan.String(), index) {
		t.Errorf("%s: plan does not use %s:\n%s", where, index, plan.String())
	}
	var n int
	if err := tx.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
