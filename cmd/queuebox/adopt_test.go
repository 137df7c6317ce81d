package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
)

// The table of the Python nats-outbox library (docs/adopting.md).
const natsOutboxDDL = `CREATE TABLE outbox_events (
  id             BIGSERIAL PRIMARY KEY,
  event_id       UUID NOT NULL UNIQUE,
  subject        TEXT NOT NULL,
  headers        JSONB NOT NULL DEFAULT '{}',
  payload        JSONB NOT NULL,
  status         VARCHAR(20) NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending','published','failed')),
  retry_count    SMALLINT NOT NULL DEFAULT 0,
  last_error     TEXT,
  aggregate_id   TEXT,
  aggregate_type TEXT,
  created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  scheduled_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at   TIMESTAMPTZ
)`

// The worked example's mapping, YAML only.
const natsOutboxDatabase = `  outboxTable: outbox_events
  columns:
    id: event_id
    topic: subject
    key: aggregate_id
    sequence: id
    state: status
    attempt: retry_count
    sentAt: published_at
  states:
    sent: published
    dead: failed
`

// adoptWorld is a per-test schema, a JetStream stream and a route file.
type adoptWorld struct {
	pg      *testenv.PG
	natsURL string
	prefix  string // every routed topic starts with prefix + "."
	stream  jetstream.Stream
}

func newAdoptWorld(t *testing.T, ddl string) *adoptWorld {
	t.Helper()
	w := &adoptWorld{pg: testenv.Postgres(t, testenv.WithoutMigrations()), natsURL: testenv.NATSURL(t)}
	if _, err := w.pg.Pool.Exec(testenv.Context(t, time.Minute), ddl); err != nil {
		t.Fatalf("create table: %v", err)
	}
	w.prefix = testenv.UniqueName("qbadopt")
	_, w.stream = testenv.NATSStream(t, w.natsURL, w.prefix+".>")
	return w
}

func (w *adoptWorld) config(t *testing.T, database, relay string) string {
	t.Helper()
	yml := fmt.Sprintf(`database:
  url: %q
%s
relay:
%s
server:
  listen: 127.0.0.1:0
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "{{ topic }}"
routes:
  - topicPattern: "%s.**"
    destination: events
`, w.pg.URL, strings.TrimRight(database, "\n"), indent(relay), w.natsURL, w.prefix)
	return writeConfig(t, yml)
}

// messages reads the stream back in order.
func (w *adoptWorld) messages(t *testing.T) []delivery {
	t.Helper()
	return (&world{stream: w.stream}).streamMessages(t)
}

func countBy(t *testing.T, pool *pgxpool.Pool, query string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	c := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		c[s] = n
	}
	return c
}

func idsBy(t *testing.T, pool *pgxpool.Pool, query string) map[string][2]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string][2]string{}
	for rows.Next() {
		var id, k, topic string
		if err := rows.Scan(&id, &k, &topic); err != nil {
			t.Fatal(err)
		}
		m[id] = [2]string{k, topic}
	}
	return m
}

// TestAdoptNatsOutboxTable is the worked example of docs/adopting.md: the
// nats-outbox table taken over with YAML only, in lock mode, by two
// replicas, one of which is killed mid-batch and started again.
func TestAdoptNatsOutboxTable(t *testing.T) {
	b := adoptNatsOutbox(t, "claimMode: lock\npollInterval: 20ms\nbatchSize: 50\nlockTimeout: 20s", "lock")
	// The table has no index for the head-of-key probe: every claim scans
	// it, which the start log says, with the DDL.
	if want := `no index on (aggregate_id, id) for the head-of-key probe: the claim will scan the table; fix: CREATE INDEX CONCURRENTLY`; !strings.Contains(b.Logs(), want) {
		t.Errorf("the start log does not warn of the missing head-of-key index (%q):\n%s", want, b.Logs())
	}
}

// TestAdoptNatsOutboxTableInBucketMode: the same table in bucket mode. The
// killed replica's buckets go to the others once its membership ends (one
// lease), and the rows it had out are delivered again with the same ids,
// which JetStream absorbs.
func TestAdoptNatsOutboxTableInBucketMode(t *testing.T) {
	adoptNatsOutbox(t, "claimMode: buckets\nlease: 3s\npollInterval: 20ms\nbatchSize: 50", "buckets")
}

// adoptNatsOutbox relays the nats-outbox table with relayCfg (claim mode
// mode) by two replicas, kills one mid-drain and starts it again, and
// checks that every row arrives once, in order per key, and that the start
// log and check name the claim mode. It returns the replica that ran to
// the end.
func adoptNatsOutbox(t *testing.T, relayCfg, mode string) *testenv.Process {
	w := newAdoptWorld(t, natsOutboxDDL)
	ctx := testenv.Context(t, time.Minute)
	const rows, keys = 3000, 30
	_, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox_events (event_id, subject, aggregate_id, payload, headers)
		SELECT gen_random_uuid(), $1, 'agg-' || (i % $2), jsonb_build_object('n', i / $2), '{"X-Source": "legacy"}'
		FROM generate_series(0, $3 - 1) AS i ORDER BY i`, w.prefix+".order.created", keys, rows)
	if err != nil {
		t.Fatal(err)
	}
	// A row no route matches: it must end failed, with the reason.
	if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox_events (event_id, subject, payload) VALUES (gen_random_uuid(), 'nowhere.x', '{}')`); err != nil {
		t.Fatal(err)
	}

	cfg := w.config(t, natsOutboxDatabase, relayCfg)
	out, _ := exec.Command(binPath, "check", "--config", cfg).CombinedOutput()
	if !strings.Contains(string(out), "claim mode "+mode) {
		t.Errorf("check does not report %s mode:\n%s", mode, out)
	}
	if mode == "lock" && !strings.Contains(string(out), "claim_token") {
		t.Errorf("check does not print the DDL for lease mode:\n%s", out)
	}
	a := startQueuebox(t, "run", "--config", cfg)
	b := startQueuebox(t, "run", "--config", cfg)
	published := func() int {
		return countBy(t, w.pg.Pool, `SELECT status, count(*) FROM outbox_events GROUP BY status`)["published"]
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return published() >= 600 }, "no progress")
	if mode == "buckets" {
		bucketStats(t, cfg)
	}
	a.Kill() // mid-drain: lock mode's open transactions roll back; bucket mode's rows out stay pending
	if published() == rows {
		t.Fatal("the relays finished before one could be killed; the test proves nothing")
	}
	a2 := startQueuebox(t, "run", "--config", cfg)
	testenv.Eventually(t, 90*time.Second, func() bool { return published() == rows }, "not every row was published")
	for _, p := range []*testenv.Process{a2, b} {
		if code := p.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("exit status after SIGTERM = %d", code)
		}
	}
	if !strings.Contains(b.Logs(), "claim mode "+mode) {
		t.Errorf("the start log does not say which claim mode is used")
	}

	states := countBy(t, w.pg.Pool, `SELECT status || '/' || (published_at IS NOT NULL) || '/' || (last_error IS NOT NULL), count(*) FROM outbox_events GROUP BY 1`)
	if states["published/true/false"] != rows || states["failed/false/true"] != 1 || len(states) != 2 {
		t.Fatalf("rows by status/published_at set/last_error set: %v", states)
	}
	ids := idsBy(t, w.pg.Pool, `SELECT event_id::text, aggregate_id, subject FROM outbox_events WHERE status = 'published'`)
	got := w.messages(t)
	if len(got) != rows {
		t.Fatalf("stream holds %d messages, want exactly %d (one per event_id)", len(got), rows)
	}
	if n := checkDeliveries(t, "JetStream", got, ids, w.prefix, false); n != keys {
		t.Fatalf("%d keys delivered, want %d", n, keys)
	}
	return b
}

// A table of another shape: BIGINT id that is also the sequence, other
// names and state values, no headers, no aggregate type, no scheduled_at,
// no updated_at, no max attempts: all found absent at start.
const appEventsDDL = `CREATE TABLE app_events (
  event_no      BIGSERIAL PRIMARY KEY,
  evt_type      TEXT NOT NULL,
  partition_key TEXT,
  body          JSONB NOT NULL,
  status        TEXT NOT NULL DEFAULT 'NEW' CHECK (status IN ('NEW', 'DONE', 'ERROR')),
  tries         INTEGER NOT NULL DEFAULT 0,
  error_text    TEXT,
  inserted_at   TIMESTAMPTZ NOT NULL DEFAULT now()
)`

const appEventsDatabase = `  outboxTable: app_events
  columns:
    id: event_no
    sequence: event_no
    topic: evt_type
    key: partition_key
    payload: body
    state: status
    attempt: tries
    lastError: error_text
    createdAt: inserted_at
  states:
    pending: NEW
    sent: DONE
    dead: ERROR
`

func TestAdoptTableOfAnotherShape(t *testing.T) {
	w := newAdoptWorld(t, appEventsDDL)
	ctx := testenv.Context(t, time.Minute)
	const rows, keys = 1000, 10
	_, err := w.pg.Pool.Exec(ctx, `INSERT INTO app_events (evt_type, partition_key, body)
		SELECT $1, 'p-' || (i % $2), jsonb_build_object('n', i / $2) FROM generate_series(0, $3 - 1) AS i ORDER BY i`,
		w.prefix+".user.updated", keys, rows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO app_events (evt_type, body) VALUES ('nowhere.x', '{}')`); err != nil {
		t.Fatal(err)
	}
	cfg := w.config(t, appEventsDatabase, "pollInterval: 20ms\nbatchSize: 40")
	a := startQueuebox(t, "run", "--config", cfg)
	b := startQueuebox(t, "run", "--config", cfg)
	testenv.Eventually(t, 90*time.Second, func() bool {
		c := countBy(t, w.pg.Pool, `SELECT status, count(*) FROM app_events GROUP BY status`)
		return c["DONE"] == rows && c["ERROR"] == 1
	}, "not every row was settled")
	a.Stop(syscall.SIGTERM, 20*time.Second)
	b.Stop(syscall.SIGTERM, 20*time.Second)
	for _, want := range []string{"claim mode lock", "headers (headers) not found", "scheduled_at (scheduledAt) not found"} {
		if !strings.Contains(a.Logs(), want) {
			t.Errorf("start log lacks %q", want)
		}
	}
	var lastErr string
	if err := w.pg.Pool.QueryRow(ctx, `SELECT error_text FROM app_events WHERE status = 'ERROR'`).Scan(&lastErr); err != nil || lastErr == "" {
		t.Fatalf("the failed row's error_text = %q (%v)", lastErr, err)
	}
	ids := idsBy(t, w.pg.Pool, `SELECT event_no::text, partition_key, evt_type FROM app_events WHERE status = 'DONE'`)
	got := w.messages(t)
	if len(got) != rows {
		t.Fatalf("stream holds %d messages, want %d", len(got), rows)
	}
	if n := checkDeliveries(t, "JetStream", got, ids, w.prefix, false); n != keys {
		t.Fatalf("%d keys delivered, want %d", n, keys)
	}

	// Replay on a BIGINT id: by id (what dead list prints), and by key.
	var deadID string
	if err := w.pg.Pool.QueryRow(ctx, `SELECT event_no::text FROM app_events WHERE status = 'ERROR'`).Scan(&deadID); err != nil {
		t.Fatal(err)
	}
	replay := func(args ...string) (int, string) {
		cmd := exec.Command(binPath, append([]string{"replay", "--config", cfg}, args...)...)
		cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	// dead list on a table without updated_at: no time to show, in the
	// table ("-") or the JSON (absent).
	for _, format := range []string{"table", "json"} {
		cmd := exec.Command(binPath, "dead", "list", "--config", cfg, "--output", format)
		cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(string(out), deadID) || strings.Contains(string(out), "updatedAt") {
			t.Fatalf("dead list --output %s on a table without updated_at: exit %d, want 0 listing %s without a time\n%s", format, code, deadID, out)
		}
		if format == "table" && !strings.Contains(string(out), "  -  ") {
			t.Fatalf("dead list: want \"-\" for the missing time\n%s", out)
		}
	}
	for _, bad := range []string{"0b6f0d8e-4c1a-4d7e-9a57-3f7f2b0c9e11", "99999999999999999999"} {
		if code, out := replay("--id", bad); code != 2 || !strings.Contains(out, "not a 64-bit integer (the table's id column is bigint)") {
			t.Fatalf("replay --id %s on a bigint id: exit %d, want 2 naming the id type\n%s", bad, code, out)
		}
	}
	if code, out := replay("--id", deadID); code != 0 || !strings.Contains(out, "replayed 1 rows") {
		t.Fatalf("replay --id %s: exit %d\n%s", deadID, code, out)
	}
	if code, out := replay("--state", "sent", "--key", "p-3", "--dry-run"); code != 0 || !strings.Contains(out, "would replay 100 rows") {
		t.Fatalf("replay --state sent --key p-3 --dry-run: exit %d\n%s", code, out)
	}
	// The rows went to JetStream, and without an updated_at column when
	// they were sent cannot be told: refused unless --yes.
	if code, out := replay("--state", "sent", "--key", "p-3"); code != 1 || !strings.Contains(out, "cannot be told") || !strings.Contains(out, "--yes") {
		t.Fatalf("replay --state sent --key p-3 to JetStream without updated_at: exit %d, want 1 asking for --yes\n%s", code, out)
	}
	if code, out := replay("--state", "sent", "--key", "p-3", "--batch-size", "30", "--yes"); code != 0 || !strings.Contains(out, "replayed 100 rows") {
		t.Fatalf("replay --state sent --key p-3 --yes: exit %d\n%s", code, out)
	}
	var firstNew, lastNew int64
	c := countBy(t, w.pg.Pool, `SELECT status || coalesce('/' || partition_key, ''), count(*) FROM app_events WHERE status = 'NEW' GROUP BY 1`)
	if c["NEW"] != 1 || c["NEW/p-3"] != 100 || len(c) != 2 {
		t.Fatalf("rows NEW after the replays, by key: %v; want the dead row and key p-3's 100", c)
	}
	if err := w.pg.Pool.QueryRow(ctx, `SELECT min(event_no), max(event_no) FROM app_events WHERE status = 'NEW' AND partition_key = 'p-3'`).Scan(&firstNew, &lastNew); err != nil || lastNew-firstNew != 99*keys {
		t.Fatalf("replayed key p-3 spans event_no %d..%d (%v); want its 100 rows", firstNew, lastNew, err)
	}
}

// TestAdoptMappingNamesMissingColumn: a mapping that names a column the
// table lacks fails check and run, naming the column, the table's column
// it most likely meant, and the fix; a required column cannot be declared
// absent, so its fix does not offer that.
func TestAdoptMappingNamesMissingColumn(t *testing.T) {
	w := newAdoptWorld(t, natsOutboxDDL)
	cfg := w.config(t, natsOutboxDatabase+"    # typo below\n", "claimMode: lock")
	bad := strings.Replace(mustRead(t, cfg), "sentAt: published_at", "sentAt: publishd_at", 1)
	bad = strings.Replace(bad, "topic: subject", "topic: subjet", 1)
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"check", "run"} {
		c := exec.Command(binPath, cmd, "--config", cfg)
		c.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
		out, err := c.CombinedOutput()
		if c.ProcessState == nil || c.ProcessState.ExitCode() != 1 {
			t.Fatalf("%s: exit %v, want 1 (%v)\n%s", cmd, c.ProcessState, err, out)
		}
		for _, want := range []string{
			`database.columns.sentAt names column publishd_at, which table outbox_events does not have (did you mean "published_at"?)`,
			`sentAt: ""`,
			`database.columns.topic names column subjet, which table outbox_events does not have (did you mean "subject"?)`,
			`correct the name (topic is required), or ALTER TABLE`,
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s output lacks %q:\n%s", cmd, want, out)
			}
		}
		if strings.Contains(string(out), `topic: ""`) {
			t.Errorf("%s offers to declare the required topic column absent:\n%s", cmd, out)
		}
	}
}

// TestCheckOffersIntegerIDAsSequence: a table without a sequence column
// whose id is filled from a sequence (BIGSERIAL) gets that column offered by
// name, the usual monotonic column; an id without one is not offered.
func TestCheckOffersIntegerIDAsSequence(t *testing.T) {
	w := newAdoptWorld(t, `CREATE TABLE app_outbox (
  event_no BIGSERIAL PRIMARY KEY,
  topic    TEXT NOT NULL,
  payload  JSONB NOT NULL,
  state    TEXT NOT NULL DEFAULT 'pending'
)`)
	cfg := w.config(t, "  outboxTable: app_outbox\n  columns:\n    id: event_no\n", "claimMode: lock")
	c := exec.Command(binPath, "check", "--config", cfg)
	c.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
	out, _ := c.CombinedOutput()
	if c.ProcessState.ExitCode() != 1 {
		t.Fatalf("check: exit %d, want 1\n%s", c.ProcessState.ExitCode(), out)
	}
	if want := "the id column event_no is filled from a sequence, so it serves: sequence: event_no"; !strings.Contains(string(out), want) {
		t.Errorf("check output lacks %q:\n%s", want, out)
	}
	// An integer id the application assigns is no sequence: not offered.
	// (-c is --config's short form.)
	w.pg.MustExec(t, testenv.Context(t, time.Minute), `ALTER TABLE app_outbox ALTER COLUMN event_no DROP DEFAULT`)
	c = exec.Command(binPath, "check", "-c", cfg)
	c.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
	out, _ = c.CombinedOutput()
	if !strings.Contains(string(out), "required column sequence (sequence) is missing") || strings.Contains(string(out), "sequence: event_no") {
		t.Errorf("check, id without a default, offers it as the sequence, or does not say the sequence is missing:\n%s", out)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPrintPlanMarksWarnings: check prints how the relay will use the table
// as info lines and the table's risks (autovacuum off, an id without a
// unique index) as warn lines, as docs/operations.md describes.
func TestPrintPlanMarksWarnings(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	rep := &checkReport{}
	rep.plan(&postgres.TablePlan{Mode: postgres.ModeLock, Why: "relay.claimMode: lock",
		Notes: []string{"column key (key) not found: no per-key ordering"}, Warnings: []string{"autovacuum is off on this server"}})
	_ = rep.printText(&b)
	want := "ok    claim mode lock (relay.claimMode: lock)\ninfo  column key (key) not found: no per-key ordering\nwarn  autovacuum is off on this server\n"
	if b.String() != want {
		t.Errorf("check's plan findings:\n%s\nwant:\n%s", b.String(), want)
	}
}

// bucketStats checks what `stats -o json` says of bucket mode's group: two
// live relays that own, with the buckets no one owns, all 64.
func bucketStats(t *testing.T, cfg string) {
	t.Helper()
	out, err := exec.Command(binPath, "stats", "--config", cfg, "-o", "json").Output()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	var st struct {
		Buckets *struct {
			Members []struct {
				Live    bool `json:"live"`
				Buckets int  `json:"buckets"`
			} `json:"members"`
			Unowned int `json:"unowned"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Buckets == nil {
		t.Fatalf("stats -o json has no buckets (%v):\n%s", err, out)
	}
	live, owned := 0, st.Buckets.Unowned
	for _, m := range st.Buckets.Members {
		if m.Live {
			live++
		}
		owned += m.Buckets
	}
	if live != 2 || owned != postgres.BucketCount {
		t.Fatalf("stats: %d live relays and %d buckets accounted for, want 2 and %d:\n%s", live, owned, postgres.BucketCount, out)
	}
}
