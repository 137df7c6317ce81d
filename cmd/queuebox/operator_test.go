package main

// In-process tests of the operator commands (dead, replay, stats) through
// execute, against a schema of their own. They swap os.Stdout and
// os.Stderr to read what the commands print, so they do not run in
// parallel.

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/internal/testenv"
)

// opWorld is a schema with the bundled table and a config file pointing at
// it.
type opWorld struct {
	pool   *pgxpool.Pool
	config string
}

func newOpWorld(t *testing.T, onDead string) *opWorld {
	t.Helper()
	pg := testenv.Postgres(t)
	cfg := "database:\n  type: postgresql\n  url: \"" + pg.URL + "\"\n" +
		"relay:\n  onDead: " + onDead + "\n" +
		// No management address: stats would otherwise ask whatever relay
		// listens on the default one (a developer's own, say) for its
		// circuits, and the output would depend on it.
		"server:\n  listen: \"\"\n" +
		"destinations:\n  hooks:\n    type: http\n    url: http://127.0.0.1:1/hooks/{{ topic }}\n" +
		"routes:\n  - topicPattern: \"**\"\n    destination: hooks\n"
	return &opWorld{pool: pg.Pool, config: writeConfig(t, cfg)}
}

// writeConfig writes cfg to a queuebox.yaml of the test's own and returns
// its path.
func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cli runs queuebox in-process and returns the exit code, stdout and
// stderr.
func (w *opWorld) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	stdout, stderr := os.Stdout, os.Stderr
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	os.Stdout, os.Stderr = outW, errW
	outC, errC := make(chan string), make(chan string)
	go func() { b, _ := io.ReadAll(outR); outC <- string(b) }()
	go func() { b, _ := io.ReadAll(errR); errC <- string(b) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	code := execute(ctx, append([]string{"--config", w.config}, args...))
	cancel()
	outW.Close()
	errW.Close()
	os.Stdout, os.Stderr = stdout, stderr
	return code, <-outC, <-errC
}

// insertDead inserts dead rows of topic, one per key given ("" = no key),
// as if an HTTP receiver had answered 500 on the only attempt.
func (w *opWorld) insertDead(t *testing.T, topic string, keys ...string) []string {
	t.Helper()
	var ids []string
	for _, k := range keys {
		var key *string
		if k != "" {
			key = &k
		}
		var id string
		err := w.pool.QueryRow(context.Background(), `INSERT INTO outbox (topic, key, payload, state, attempt, max_attempts, last_error, claim_token, claimed_at)
			VALUES ($1, $2, '{}', 'dead', 1, 1, E'http 500: Internal Server Error\nbody: oops', gen_random_uuid(), now()) RETURNING id::text`, topic, key).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestDeadListJSON(t *testing.T) {
	w := newOpWorld(t, "release")
	ids := w.insertDead(t, "billing.invoice", "k1", "")
	other := w.insertDead(t, "order.created", "k2")
	code, out, errOut := w.cli(t, "dead", "list", "--output", "json", "--topic", "billing.*")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r["id"].(string))
		for _, f := range []string{"id", "topic", "key", "attempt", "lastError", "updatedAt", "held"} {
			if _, ok := r[f]; !ok {
				t.Errorf("row lacks %q: %v", f, r)
			}
		}
		if r["lastError"] != "http 500: Internal Server Error\nbody: oops" || r["attempt"] != float64(1) || r["held"] != false {
			t.Errorf("row %v", r)
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("listed %v, want %v (not %v)", got, ids, other)
	}
	// The table: one line per row, the error on one line.
	code, out, _ = w.cli(t, "dead", "list")
	if code != 0 || !strings.Contains(out, "LAST_ERROR") || !strings.Contains(out, "http 500: Internal Server Error body: oops") ||
		strings.Count(out, "\n") != 4 {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"dead", "list", "--output", "yaml"},
		{"dead", "list", "--since", "yesterday"},
		{"dead", "list", "--topic", "a.**.b"},
		{"dead", "list", "--limit", "0"},
		{"dead", "release"},
	} {
		if code, _, _ := w.cli(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

func TestReplayByTopic(t *testing.T) {
	w := newOpWorld(t, "release")
	ids := w.insertDead(t, "billing.invoice", "k1", "", "")
	w.insertDead(t, "order.created", "k2")

	code, _, errOut := w.cli(t, "replay")
	if code != 2 || !strings.Contains(errOut, "needs a selector") || !strings.Contains(errOut, "Run 'queuebox replay --help' for usage.") {
		t.Fatalf("replay without selector: exit %d, %s (want the selector named, and the usage of replay pointed at)", code, errOut)
	}
	for _, bad := range [][]string{
		{"replay", "--state", "pending", "--key", "k"},
		{"replay", "--id", "nope"},
		{"replay", "--topic", "x", "--since", "soon"},
		{"replay", "--topic", "x", "--batch-size", "0"},
	} {
		if code, _, _ := w.cli(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
	code, out, _ := w.cli(t, "replay", "--topic", "billing.*", "--dry-run")
	if code != 0 || strings.TrimSpace(out) != "would replay 3 rows" {
		t.Fatalf("dry run: exit %d, %q", code, out)
	}
	code, out, errOut = w.cli(t, "--log-format", "json", "replay", "--topic", "billing.*", "--since", "1h", "--batch-size", "2")
	if code != 0 || strings.TrimSpace(out) != "replayed 3 rows" {
		t.Fatalf("replay: exit %d, %q, %s", code, out, errOut)
	}
	var logLine map[string]any
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &logLine) != nil {
		t.Fatalf("want one JSON log line, got %q", errOut)
	}
	if logLine["msg"] != "replay" || logLine["topic"] != "billing.*" || logLine["rows"] != float64(3) {
		t.Errorf("log line %v", logLine)
	}
	rows, err := w.pool.Query(context.Background(), `SELECT id::text, state, attempt, last_error IS NULL, claim_token IS NULL FROM outbox WHERE topic = 'billing.invoice'`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var (
			id, state                string
			attempt                  int
			errCleared, tokenCleared bool
		)
		if err := rows.Scan(&id, &state, &attempt, &errCleared, &tokenCleared); err != nil {
			t.Fatal(err)
		}
		n++
		if !slices.Contains(ids, id) || state != "pending" || attempt != 0 || !errCleared || !tokenCleared {
			t.Errorf("replayed row %s: %s attempt %d, error cleared %v, token cleared %v", id, state, attempt, errCleared, tokenCleared)
		}
	}
	if n != 3 {
		t.Errorf("%d billing rows, want 3", n)
	}
	var dead int
	_ = w.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE state = 'dead'`).Scan(&dead)
	if dead != 1 {
		t.Errorf("%d dead rows left, want the order.created one", dead)
	}
}

func TestStatsJSON(t *testing.T) {
	w := newOpWorld(t, "hold")
	ctx := context.Background()
	dead := w.insertDead(t, "billing.invoice", "K")
	_, err := w.pool.Exec(ctx, `UPDATE outbox SET held_at = now() WHERE id = $1`, dead[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, scheduled_at)
		VALUES ('billing.invoice', 'K', '{}', now() - interval '1 minute'), ('order.created', NULL, '{}', now()), ('order.created', NULL, '{}', now())`)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := w.cli(t, "stats", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st struct {
		States                  map[string]int64 `json:"states"`
		OldestPendingAgeSeconds *float64         `json:"oldestPendingAgeSeconds"`
		Backlog                 []struct {
			Topic                   string   `json:"topic"`
			Pending                 int64    `json:"pending"`
			OldestPendingAgeSeconds *float64 `json:"oldestPendingAgeSeconds"`
		} `json:"backlog"`
		HeldKeys []struct {
			Key     string `json:"key"`
			DeadID  string `json:"deadId"`
			Waiting int64  `json:"waiting"`
		} `json:"heldKeys"`
		OldestProcessingAgeSeconds *float64 `json:"oldestProcessingAgeSeconds"`
		ExpiredLeases              *int64   `json:"expiredLeases"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, out)
	}
	if st.States["pending"] != 3 || st.States["dead"] != 1 || st.States["sent"] != 0 || st.States["processing"] != 0 {
		t.Errorf("states %v", st.States)
	}
	if st.OldestPendingAgeSeconds == nil || *st.OldestPendingAgeSeconds < 59 {
		t.Errorf("oldest pending age %v, want about 60s", st.OldestPendingAgeSeconds)
	}
	if len(st.Backlog) != 2 || st.Backlog[0].Topic != "order.created" || st.Backlog[0].Pending != 2 {
		t.Errorf("backlog %+v", st.Backlog)
	}
	if st.OldestProcessingAgeSeconds == nil || *st.OldestProcessingAgeSeconds != 0 || st.ExpiredLeases == nil || *st.ExpiredLeases != 0 {
		t.Errorf("no processing rows: oldestProcessingAgeSeconds %v, expiredLeases %v, want 0 and 0", st.OldestProcessingAgeSeconds, st.ExpiredLeases)
	}
	if len(st.HeldKeys) != 1 || st.HeldKeys[0].Key != "K" || st.HeldKeys[0].DeadID != dead[0] || st.HeldKeys[0].Waiting != 1 {
		t.Errorf("held keys %+v", st.HeldKeys)
	}
	code, out, _ = w.cli(t, "stats")
	if code != 0 || !strings.Contains(out, "HELD_KEY") || !strings.Contains(out, "billing.invoice") {
		t.Errorf("stats table (exit %d):\n%s", code, out)
	}
	// dead release lets K flow.
	code, out, _ = w.cli(t, "dead", "release", "--key", "K")
	if code != 0 || !strings.Contains(out, "1 dead rows no longer hold it") {
		t.Errorf("dead release: exit %d, %q", code, out)
	}
	code, out, _ = w.cli(t, "stats", "-o", "json")
	if code != 0 || !strings.Contains(out, `"heldKeys": []`) {
		t.Errorf("after release (exit %d): %s", code, out)
	}
}

// TestStatsShowsWhatProcessingRowsHold: a relay killed mid-publish leaves
// its rows processing, and their keys' later rows wait until the lease
// expires and a reaper returns them. stats says how old the oldest claim is
// and how many leases have expired, so that an operator sees what the
// backlog waits for.
func TestStatsShowsWhatProcessingRowsHold(t *testing.T) {
	w := newOpWorld(t, "release")
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, state, claimed_at, lease_expires_at, claim_token)
		VALUES ('order.created', 'A', '{}', 'processing', now() - interval '40 seconds', now() - interval '10 seconds', gen_random_uuid()),
		       ('order.created', 'B', '{}', 'processing', now() - interval '5 seconds', now() + interval '25 seconds', gen_random_uuid()),
		       ('order.created', 'C', '{}', 'processing', now() - interval '35 seconds', now() - interval '5 seconds', gen_random_uuid()),
		       ('order.created', 'A', '{}', 'pending', NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := w.cli(t, "stats", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st struct {
		OldestProcessingAgeSeconds float64 `json:"oldestProcessingAgeSeconds"`
		ExpiredLeases              int64   `json:"expiredLeases"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, out)
	}
	if st.OldestProcessingAgeSeconds < 39 || st.OldestProcessingAgeSeconds > 60 || st.ExpiredLeases != 2 {
		t.Errorf("oldestProcessingAgeSeconds %v, expiredLeases %d; want about 40 and 2\n%s", st.OldestProcessingAgeSeconds, st.ExpiredLeases, out)
	}
	code, out, _ = w.cli(t, "stats")
	if code != 0 || !strings.Contains(out, "oldest processing row: claimed 4") ||
		!strings.Contains(out, "2 with an expired lease") || !strings.Contains(out, "relay.reapInterval, 5s") {
		t.Errorf("stats table (exit %d) does not say what the processing rows hold:\n%s", code, out)
	}
}

// TestReplayLeavesAKeyWithARowInFlight: the dead head of key k is replayed
// while a later row of k is processing (another relay is delivering it).
// Moved back, the dead row would be k's head (it comes first in sequence
// order) and claimable at once: two rows of one key in flight. It is left,
// and the output says so; once the later row is sent, the replay moves it.
func TestReplayLeavesAKeyWithARowInFlight(t *testing.T) {
	w := newOpWorld(t, "release")
	ctx := context.Background()
	dead := w.insertDead(t, "billing.invoice", "k")[0]
	free := w.insertDead(t, "billing.invoice", "other")[0]
	var later string
	if err := w.pool.QueryRow(ctx, `INSERT INTO outbox (topic, key, payload, state, claim_token, claimed_at, lease_expires_at)
		VALUES ('billing.invoice', 'k', '{}', 'processing', gen_random_uuid(), now(), now() + interval '1 minute') RETURNING id::text`).Scan(&later); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := w.cli(t, "replay", "--topic", "billing.*")
	if code != 0 || !strings.HasPrefix(out, "replayed 1 rows\nleft 1 selected rows: their key has a row being delivered") {
		t.Fatalf("replay beside a row in flight: exit %d, %q, %s", code, out, errOut)
	}
	state := func(id string) string {
		var s string
		if err := w.pool.QueryRow(ctx, `SELECT state FROM outbox WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if state(dead) != "dead" || state(free) != "pending" {
		t.Fatalf("after the replay: k's dead row %s, the other key's %s; want dead and pending", state(dead), state(free))
	}
	if _, err := w.pool.Exec(ctx, `UPDATE outbox SET state = 'sent', lease_expires_at = NULL WHERE id = $1`, later); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := w.cli(t, "replay", "--key", "k"); code != 0 || strings.TrimSpace(out) != "replayed 1 rows" {
		t.Fatalf("replay once the key's row was sent: exit %d, %q, %s", code, out, errOut)
	}
	if state(dead) != "pending" {
		t.Fatalf("k's dead row is %s after the second replay, want pending", state(dead))
	}
}

// TestMigrateSQLUnknownTypeIsAUsageError: a --type that names no bundled
// migrations is a usage error (exit 2), like every other bad flag.
func TestMigrateSQLUnknownTypeIsAUsageError(t *testing.T) {
	w := newOpWorld(t, "release")
	code, _, errOut := w.cli(t, "migrate", "sql", "--type", "foo")
	if code != 2 || !strings.Contains(errOut, `--type "foo": want postgresql or sqlserver`) {
		t.Fatalf("migrate sql --type foo: exit %d, %s", code, errOut)
	}
	if code, out, errOut := w.cli(t, "migrate", "sql", "--type", "postgresql"); code != 0 || !strings.Contains(out, "CREATE TABLE") {
		t.Fatalf("migrate sql --type postgresql: exit %d, %s", code, errOut)
	}
}

// TestOperatorCommandsCheckTheLogFlags: stats and dead list log nothing,
// but a bad --log-level is still an error there, as on every command.
func TestOperatorCommandsCheckTheLogFlags(t *testing.T) {
	w := newOpWorld(t, "release")
	for _, args := range [][]string{{"--log-level", "loud", "stats"}, {"--log-format", "xml", "dead", "list"}} {
		if code, _, errOut := w.cli(t, args...); code == 0 || !strings.Contains(errOut, args[1]) {
			t.Errorf("%v: exit %d, %s; want an error naming %q", args, code, errOut, args[1])
		}
	}
}

// TestMigrateSQLBuildsWhatMigrateBuilds: the script 'migrate sql' prints,
// run by psql on an empty schema, builds the table that 'migrate' builds:
// the same columns, indexes and storage options. Before, the script held
// every migration's down part after its up part, which psql runs as well
// (goose's markers are comments to it): it created the table, then
// dropped it. And 'migrate status' writes nothing: on an empty schema it
// lists every migration pending without creating goose_db_version, and on
// a schema that does not exist yet it does not fail.
func TestMigrateSQLBuildsWhatMigrateBuilds(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		testenv.Unavailable(t, "psql (the PostgreSQL client)", err)
	}
	migrated := testenv.Postgres(t)
	manual := testenv.Postgres(t, testenv.WithoutMigrations())
	ctx := testenv.Context(t, time.Minute)
	world := func(table string) *opWorld {
		cfg := "database:\n  url: \"" + manual.URL + "\"\n  outboxTable: " + table + "\n" +
			"destinations:\n  hooks:\n    type: http\n    url: http://127.0.0.1:1/hooks\n" +
			"routes:\n  - topicPattern: \"**\"\n    destination: hooks\n"
		return &opWorld{pool: manual.Pool, config: writeConfig(t, cfg)}
	}
	exists := func(name string) bool {
		var ok bool
		if err := manual.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	missing := manual.Schema + "_later"
	for _, table := range []string{"outbox", missing + ".outbox"} {
		code, out, errOut := world(table).cli(t, "migrate", "status")
		if code != 0 || strings.Count(out, "pending") != 3 {
			t.Fatalf("migrate status (outboxTable %s) before any migration: exit %d\n%s%s", table, code, out, errOut)
		}
	}
	var schemas int
	if err := manual.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, missing).Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("migrate status created schema %s (%d, %v)", missing, schemas, err)
	}
	if exists(manual.Schema + ".goose_db_version") {
		t.Fatal("migrate status created goose_db_version")
	}

	code, script, errOut := world("outbox").cli(t, "migrate", "sql", "--type", "postgresql")
	if code != 0 || strings.Contains(script, "+goose Down") || strings.Contains(script, "DROP TABLE") {
		t.Fatalf("migrate sql: exit %d, the script holds a down part or drops the table\n%s%s", code, script, errOut)
	}
	file := filepath.Join(t.TempDir(), "outbox.sql")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", manual.URL, "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("psql -f (the migrate sql script): %v\n%s", err, out)
	}
	if !exists(manual.Schema + ".outbox") {
		t.Fatal("the script left no outbox table")
	}
	shape := func(pg *testenv.PG) string {
		var s string
		err := pg.Pool.QueryRow(ctx, `SELECT
			(SELECT string_agg(column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '-'), E'\n' ORDER BY column_name)
			   FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox')
			|| E'\n' ||
			(SELECT string_agg(replace(indexdef, $1 || '.', ''), E'\n' ORDER BY indexname) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox')
			|| E'\n' ||
			(SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = ($1 || '.outbox')::regclass)`, pg.Schema).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got, want := shape(manual), shape(migrated); got != want {
		t.Fatalf("the table the script built differs from the migrated one:\n--- script\n%s\n--- migrate\n%s", got, want)
	}
}

// TestCheckWarnsAboutUnmappedStateValues: rows whose state no state of
// database.states names are never claimed and never counted; a mapping that
// does not match the data would deliver nothing and say nothing. check
// names the values and their rows.
func TestCheckWarnsAboutUnmappedStateValues(t *testing.T) {
	w := newOpWorld(t, "release")
	if _, err := w.pool.Exec(context.Background(), `INSERT INTO outbox (topic, payload, state)
		VALUES ('t', '{}', 'pending'), ('t', '{}', 'archived'), ('t', '{}', 'archived'), ('t', '{}', 'PENDING')`); err != nil {
		t.Fatal(err)
	}
	_, out, _ := w.cli(t, "check")
	for _, want := range []string{
		`warn  table outbox: 2 rows have state "archived", which no state of database.states names`,
		`warn  table outbox: 1 rows have state "PENDING", which no state of database.states names`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `state "pending"`) {
		t.Errorf("check warned about a mapped value:\n%s", out)
	}
}
