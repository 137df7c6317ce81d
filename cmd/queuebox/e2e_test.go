package main

// End-to-end tests of the built binary against the real PostgreSQL and NATS
// JetStream of this machine (internal/testenv), with an in-process HTTP
// receiver. Each test owns its schema, stream, subjects and receiver.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testenv"
)

var binPath string

func TestMain(m *testing.M) {
	path, err := testenv.BuildQueueboxOnce()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = path
	code := m.Run()
	testenv.RemoveQueuebox()
	os.Exit(code)
}

// startQueuebox runs the built binary with args for the rest of the test.
func startQueuebox(t *testing.T, args ...string) *testenv.Process {
	t.Helper()
	return testenv.Start(t, binPath, fmt.Sprint(args), args...)
}

// receiver is an HTTP endpoint that records every accepted delivery.
type receiver struct {
	mu    sync.Mutex
	got   []delivery
	delay time.Duration
	srv   *httptest.Server
}

type delivery struct {
	ID, Key, Topic, Attempt string
	N                       int
}

func newReceiver(t *testing.T, delay time.Duration) *receiver {
	r := &receiver{delay: delay}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			N int `json:"n"`
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.delay > 0 {
			time.Sleep(r.delay)
		}
		r.mu.Lock()
		r.got = append(r.got, delivery{ID: req.Header.Get("X-Message-Id"), Key: req.Header.Get("X-Message-Key"),
			Topic: req.Header.Get("X-Topic"), Attempt: req.Header.Get("X-Attempt"), N: body.N})
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// world is one test's schema, stream and receiver.
type world struct {
	pg      *testenv.PG
	natsURL string
	subject string // subject prefix, e.g. qb1234
	js      jetstream.JetStream
	stream  jetstream.Stream
	hooks   *receiver
}

func newWorld(t *testing.T, hookDelay time.Duration) *world {
	t.Helper()
	w := &world{pg: testenv.Postgres(t), natsURL: testenv.NATSURL(t)}
	w.subject = testenv.UniqueName("qbe2e")
	w.js, w.stream = testenv.NATSStream(t, w.natsURL, w.subject+".>")
	w.hooks = newReceiver(t, hookDelay)
	return w
}

// config writes a route file: order.* to JetStream, hook.* to HTTP.
func (w *world) config(t *testing.T, relay string) string {
	t.Helper()
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
%s
server:
  listen: 127.0.0.1:0
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
  hooks:
    type: http
    url: "%s/hooks/{{ topic }}"
routes:
  - topicPattern: "order.*"
    destination: events
  - topicPattern: "hook.*"
    destination: hooks
`, w.pg.URL, w.pg.Schema, indent(relay), w.natsURL, w.subject, w.hooks.srv.URL)
	return writeConfig(t, yml)
}

func indent(s string) string {
	if strings.TrimSpace(s) == "" {
		return "  batchSize: 100"
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString("  " + strings.TrimSpace(l) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// insert writes n rows over keys keys; row i of a key carries {"n": i}.
// topicOf picks the topic from the row's number within its key.
func insert(t *testing.T, pool *pgxpool.Pool, n, keys int, topicOf func(n int) string) {
	t.Helper()
	if err := testenv.InsertKeyed(testenv.Context(t, time.Minute), pool, n, make([]int, keys), topicOf); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

func countStates(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT state, count(*) FROM outbox GROUP BY state`)
	if err != nil {
		t.Fatalf("count states: %v", err)
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

func waitAllSent(t *testing.T, pool *pgxpool.Pool, total int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := countStates(t, pool)
		if c["sent"] == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: states %v, want %d sent", within, c, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rowIDs maps every row id to its key and topic.
func rowIDs(t *testing.T, pool *pgxpool.Pool) map[string][2]string {
	t.Helper()
	return idsBy(t, pool, `SELECT id::text, key, topic FROM outbox`)
}

// streamMessages reads the whole stream back in stream order.
func (w *world) streamMessages(t *testing.T) []delivery {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	info, err := w.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := w.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []delivery
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			var body struct {
				N int `json:"n"`
			}
			_ = json.Unmarshal(m.Data(), &body)
			h := m.Headers()
			out = append(out, delivery{ID: h.Get("Nats-Msg-Id"), Key: h.Get("X-Message-Key"), Topic: h.Get("X-Topic"), Attempt: h.Get("X-Attempt"), N: body.N})
			n++
		}
		if n == 0 {
			break
		}
	}
	return out
}

// checkDeliveries asserts that got holds every row of ids whose topic has
// prefix exactly once, with the row's key, and that per key the numbers
// increase. It returns the number of distinct keys.
func checkDeliveries(t *testing.T, what string, got []delivery, ids map[string][2]string, prefix string, allowDuplicates bool) int {
	t.Helper()
	want := 0
	for _, r := range ids {
		if strings.HasPrefix(r[1], prefix) {
			want++
		}
	}
	seen := map[string]int{}
	last := map[string]int{}
	for _, d := range got {
		r, ok := ids[d.ID]
		if !ok {
			t.Fatalf("%s: message id %q is no row's id", what, d.ID)
		}
		if r[0] != d.Key || r[1] != d.Topic {
			t.Fatalf("%s: message %s carries key %q topic %q, row has %q %q", what, d.ID, d.Key, d.Topic, r[0], r[1])
		}
		seen[d.ID]++
		if seen[d.ID] > 1 {
			if !allowDuplicates {
				t.Fatalf("%s: message %s delivered %d times", what, d.ID, seen[d.ID])
			}
			continue
		}
		if p, ok := last[d.Key]; ok && d.N <= p {
			t.Fatalf("%s: key %s: n=%d arrived after n=%d", what, d.Key, d.N, p)
		}
		last[d.Key] = d.N
	}
	if len(seen) != want {
		t.Fatalf("%s: %d distinct ids delivered, want %d", what, len(seen), want)
	}
	return len(last)
}

// TestRunDeliversEveryRowInOrder is the relay core's acceptance run: 10,000
// rows over 100 keys, each key alternating between JetStream and HTTP.
func TestRunDeliversEveryRowInOrder(t *testing.T) {
	w := newWorld(t, 0)
	insert(t, w.pg.Pool, 10000, 100, func(n int) string {
		if n%2 == 0 {
			return "order.created"
		}
		return "hook.created"
	})
	p := startQueuebox(t, "run", "--config", w.config(t, "pollInterval: 20ms"))
	waitAllSent(t, w.pg.Pool, 10000, 90*time.Second)
	if code := p.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}
	ids := rowIDs(t, w.pg.Pool)
	keys := checkDeliveries(t, "JetStream", w.streamMessages(t), ids, "order.", false)
	keys2 := checkDeliveries(t, "HTTP", w.hooks.deliveries(), ids, "hook.", false)
	if keys != 100 || keys2 != 100 {
		t.Fatalf("keys seen: JetStream %d, HTTP %d; want 100 each", keys, keys2)
	}
	for _, d := range w.hooks.deliveries() {
		if d.Attempt != "0" {
			t.Fatalf("HTTP delivery %s has X-Attempt %q, want 0", d.ID, d.Attempt)
		}
	}
}

// TestKillMidDeliveryLosesNothing kills the relay with SIGKILL in the middle
// of the backlog and starts it again: every row is delivered, and JetStream
// holds one copy per id (redeliveries are absorbed by Nats-Msg-Id).
func TestKillMidDeliveryLosesNothing(t *testing.T) {
	w := newWorld(t, 0)
	insert(t, w.pg.Pool, 10000, 100, func(int) string { return "order.created" })
	cfg := w.config(t, "pollInterval: 20ms\nlease: 2s\nreapInterval: 200ms\nbatchSize: 200")
	p := startQueuebox(t, "run", "--config", cfg)
	testenv.Eventually(t, 60*time.Second, func() bool { return countStates(t, w.pg.Pool)["sent"] >= 2000 }, "relay made no progress")
	p.Kill()
	before := countStates(t, w.pg.Pool)
	if before["sent"] == 10000 {
		t.Fatal("the relay finished before it could be killed; the test proves nothing")
	}
	t.Logf("after SIGKILL: %v", before)

	p2 := startQueuebox(t, "run", "--config", cfg)
	waitAllSent(t, w.pg.Pool, 10000, 90*time.Second)
	p2.Stop(syscall.SIGTERM, 20*time.Second)
	ids := rowIDs(t, w.pg.Pool)
	got := w.streamMessages(t)
	if len(got) != 10000 {
		t.Fatalf("stream holds %d messages, want exactly 10000 (one per id)", len(got))
	}
	checkDeliveries(t, "JetStream", got, ids, "order.", false)
}

// TestTwoReplicasShareTheWork runs two relays on one table: per-key order
// holds at the receiver and both relays deliver.
func TestTwoReplicasShareTheWork(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	insert(t, w.pg.Pool, 6000, 100, func(int) string { return "hook.created" })
	cfg := w.config(t, "pollInterval: 20ms\nbatchSize: 50\nconcurrency: 8")
	a := startQueuebox(t, "run", "--config", cfg)
	b := startQueuebox(t, "run", "--config", cfg)
	addrA, addrB := a.ManagementAddr(), b.ManagementAddr()
	waitAllSent(t, w.pg.Pool, 6000, 120*time.Second)
	sentA, sentB := scrapeSent(t, addrA), scrapeSent(t, addrB)
	a.Stop(syscall.SIGTERM, 20*time.Second)
	b.Stop(syscall.SIGTERM, 20*time.Second)
	t.Logf("replica A sent %d, replica B sent %d", sentA, sentB)
	if sentA == 0 || sentB == 0 {
		t.Fatalf("one replica stayed idle: A sent %d, B sent %d", sentA, sentB)
	}
	if sentA+sentB != 6000 {
		t.Fatalf("replicas sent %d + %d, want 6000 in total", sentA, sentB)
	}
	checkDeliveries(t, "HTTP", w.hooks.deliveries(), rowIDs(t, w.pg.Pool), "hook.", false)
}

func scrapeSent(t *testing.T, addr string) int {
	t.Helper()
	f, ok := testenv.LookupMetric(testenv.Scrape(t, addr), `queuebox_deliveries_total{destination="hooks",outcome="sent"}`)
	if !ok {
		t.Fatalf("no queuebox_deliveries_total for hooks/sent in the scrape of %s", addr)
	}
	return int(f)
}

// TestSIGTERMFinishesInFlightRows stops a relay in the middle of slow
// deliveries: it exits 0 and leaves no row processing.
func TestSIGTERMFinishesInFlightRows(t *testing.T) {
	w := newWorld(t, 50*time.Millisecond)
	insert(t, w.pg.Pool, 400, 400, func(int) string { return "hook.created" })
	p := startQueuebox(t, "run", "--config", w.config(t, "batchSize: 100\nconcurrency: 4\nshutdownTimeout: 20s"))
	testenv.Eventually(t, 30*time.Second, func() bool { return len(w.hooks.deliveries()) >= 10 }, "no delivery started")
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}
	c := countStates(t, w.pg.Pool)
	if c["processing"] != 0 {
		t.Fatalf("rows left processing after a graceful stop: %v", c)
	}
	if c["sent"] != len(w.hooks.deliveries()) {
		t.Fatalf("%d rows marked sent but the receiver accepted %d", c["sent"], len(w.hooks.deliveries()))
	}
	if c["sent"]+c["pending"] != 400 {
		t.Fatalf("states after stop: %v, want sent+pending = 400", c)
	}
}

// TestStartFailuresExitOneWithTheCause covers the bad inputs a user meets
// first.
func TestStartFailuresExitOneWithTheCause(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `database:
  url: postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2
destinations:
  hooks:
    type: http
    url: http://127.0.0.1:9/x
routes:
  - topicPattern: "**"
    destination: hooks
`
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"malformed config", []string{"run", "--config", write("bad.yaml", "database: [\n")}, 1, "bad.yaml"},
		{"unknown key", []string{"run", "--config", write("typo.yaml", strings.Replace(good, "routes:", "routez:", 1))}, 1, `did you mean "routes"`},
		{"unknown destination", []string{"run", "--config", write("route.yaml", strings.Replace(good, "destination: hooks", "destination: hookz", 1))}, 1, `no destination "hookz"`},
		{"unreachable database", []string{"run", "--config", write("db.yaml", good)}, 1, "cannot reach the database at 127.0.0.1:1"},
		{"another database's URL", []string{"run", "--config", write("mysql.yaml", strings.Replace(good, "postgres://postgres@127.0.0.1:1/postgres", "mysql://root:pw@127.0.0.1:3306/app", 1))}, 1, "database.url is a mysql:// URL; database.type postgresql needs postgres://"},
		{"not a URL", []string{"run", "--config", write("nourl.yaml", strings.Replace(good, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", "db.internal:5432/app", 1))}, 1, "write it as postgres://user@host:5432/dbname"},
		{"unknown role", []string{"run", "--config", write("role.yaml", strings.Replace(good, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", pgURLAs(t, "qb_no_such_role"), 1))}, 1, `does not let user "qb_no_such_role" in`},
		{"missing config", []string{"run"}, 2, "--config"},
		{"unknown command", []string{"runn"}, 2, "unknown command"},
		{"missing file", []string{"run", "--config", filepath.Join(dir, "nope.yaml")}, 1, "nope.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binPath, tc.args...)
			cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Fatalf("exit status %d, want %d; output:\n%s", code, tc.code, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, out)
			}
		})
	}
}

// pgURLAs is the test PostgreSQL's URL with user as its user.
func pgURLAs(t *testing.T, user string) string {
	t.Helper()
	testenv.Postgres(t, testenv.WithoutMigrations()) // skips (or fails under CI) when PostgreSQL is missing
	u, err := url.Parse(testenv.Env("QUEUEBOX_TEST_POSTGRES_URL", testenv.DefaultPostgresURL))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// TestDemo runs `queuebox demo` against the local PostgreSQL: it must pass
// its own verification.
func TestDemo(t *testing.T) {
	pg := testenv.Postgres(t) // skips (or fails under CI) when PostgreSQL is missing
	url := testenv.Env("QUEUEBOX_TEST_POSTGRES_URL", testenv.DefaultPostgresURL)
	cmd := exec.Command(binPath, "demo", "--rows", "2000", "--keys", "100", "--rate", "4000")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	oks := 0
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "ok ") {
			oks++
		}
	}
	if oks != 5 || !strings.Contains(string(out), "All checks passed") {
		t.Fatalf("demo did not report 5 passed checks:\n%s", out)
	}
	// It drops its schema at the end (--keep keeps it).
	var left bool
	if err := pg.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, demoSchema).Scan(&left); err != nil || left {
		t.Fatalf("schema %s left behind after the demo (%v)", demoSchema, err)
	}
}

// TestCheck reports a healthy setup with exit 0, notes a database.url that
// keeps PostgreSQL's plan cache, and reports a missing column with exit 1
// and the DDL that adds it.
func TestCheck(t *testing.T) {
	w := newWorld(t, 0)
	cfg := w.config(t, "")
	run := func() (int, string) {
		cmd := exec.Command(binPath, "check", "--config", cfg)
		cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run()
	if code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "plan_cache_mode") {
		t.Fatalf("check on a fresh table: exit %d\n%s", code, out)
	}
	// The NATS destination's subject is a template and sets no stream:
	// nothing can confirm a stream covers what it renders, and check says
	// so (a warning: the world's stream does cover it).
	if !strings.Contains(out, `warn  nats destination "events": subject "`+w.subject+`.{{ topic }}" is a template and no stream is set`) {
		t.Fatalf("check does not warn that no stream is set for a subject template:\n%s", out)
	}
	healthy := cfg
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(t.TempDir(), "plan-cache.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), w.pg.URL, w.pg.URL+"&plan_cache_mode=auto", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := run(); code != 0 || !strings.Contains(out, "set plan_cache_mode = auto") {
		t.Fatalf("check with plan_cache_mode=auto in the url: exit %d, want 0 and a note\n%s", code, out)
	}
	// A database that does not answer: the line names it once, with the fix.
	cfg = filepath.Join(t.TempDir(), "unreachable.yaml")
	u, err := url.Parse(w.pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "127.0.0.1:1"
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), w.pg.URL, u.String(), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := run(); code != 1 || !strings.Contains(out, "FAIL  cannot reach the database at 127.0.0.1:1") || !strings.Contains(out, "check database.url") {
		t.Fatalf("check with an unreachable database: exit %d, want 1 and the place once\n%s", code, out)
	}
	cfg = healthy
	if _, err := w.pg.Pool.Exec(context.Background(), `ALTER TABLE outbox DROP COLUMN aggregate_type`); err != nil {
		t.Fatal(err)
	}
	code, out = run()
	if code != 1 {
		t.Fatalf("check with a missing column: exit %d, want 1\n%s", code, out)
	}
	want := fmt.Sprintf(`ALTER TABLE "%s"."outbox" ADD COLUMN "aggregate_type" VARCHAR(255);`, w.pg.Schema)
	if !strings.Contains(out, "column aggregate_type (aggregateType) is missing") || !strings.Contains(out, want) {
		t.Fatalf("check output does not name the column and the fix %q:\n%s", want, out)
	}
}

// TestProcessingAgeGauge: a relay reports, table-wide, how long ago the
// oldest processing row was claimed, so that an alert sees a key held by a
// row that another relay (here: one that died, its lease still running)
// claimed long ago.
func TestProcessingAgeGauge(t *testing.T) {
	w := newWorld(t, 0)
	if _, err := w.pg.Pool.Exec(context.Background(), `INSERT INTO outbox (topic, key, payload, state, claimed_at, lease_expires_at, claim_token)
		VALUES ('hook.stuck', 'K', '{}', 'processing', now() - interval '90 seconds', now() + interval '1 hour', gen_random_uuid())`); err != nil {
		t.Fatal(err)
	}
	p := startQueuebox(t, "run", "--config", w.config(t, ""))
	testenv.Eventually(t, 15*time.Second, func() bool {
		v, ok := testenv.LookupMetric(testenv.Scrape(t, p.ManagementAddr()), "queuebox_oldest_processing_age_seconds")
		return ok && v >= 89 && v < 200
	}, "queuebox_oldest_processing_age_seconds never showed the row claimed 90 s ago")
}
