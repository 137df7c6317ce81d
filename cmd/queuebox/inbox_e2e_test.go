package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// freePort returns a loopback address whose port was free a moment ago:
// the ingest port must stay the same across a restart, for the clients
// that keep retrying.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

var ingestRE = regexp.MustCompile(`inbox ingest listening"? addr=(\S+)`)

func waitIngest(t *testing.T, p *testenv.Process) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool { return ingestRE.MatchString(p.Logs()) || p.Exited() }, "no ingest address logged")
	if p.Exited() {
		t.Fatalf("queuebox exited:\n%s", testenv.Tail(p.Logs(), 30))
	}
}

// TestInboxSurvivesSIGKILL has 16 clients post 1,200 webhooks (each with
// its own Idempotency-Key, retrying until they get 202 or 200, and
// repeating some already answered) to `queuebox run` while the process is
// killed with SIGKILL and started again. Every key is answered, stored
// once in the inbox and handed to the outbox once, under the id its first
// 202 named; the relay delivers each to the webhook receiver.
func TestInboxSurvivesSIGKILL(t *testing.T) {
	pg := testenv.InboxPostgres(t)
	recv := newReceiver(t, 0)
	addr := freePort(t)
	path := writeInboxConfig(t, pg.URL, recv.srv.URL, addr)
	p := startQueuebox(t, "run", "--config", path)
	waitIngest(t, p)

	const total = 1200
	ctx := testenv.Context(t, 2*time.Minute)
	s := &senders{t: t, addr: addr, total: total, firstID: map[string]string{}}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	answered := &s.answered
	mu, firstID := &s.mu, s.firstID
	testenv.Eventually(t, time.Minute, func() bool { return answered.Load() >= total/3 }, "clients got no answers")
	p.Kill()
	p = startQueuebox(t, "run", "--config", path)
	waitIngest(t, p)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("clients did not finish")
	}
	var rows, keys, handed int
	q := `SELECT count(*), count(DISTINCT idempotency_key), (SELECT count(*) FROM outbox o WHERE o.id IN (SELECT id FROM inbox)) FROM inbox WHERE source = 'orders'`
	if err := pg.Pool.QueryRow(ctx, q).Scan(&rows, &keys, &handed); err != nil {
		t.Fatal(err)
	}
	if rows != total || keys != total || handed != total {
		t.Fatalf("inbox rows %d, distinct keys %d, outbox rows %d; want %d each", rows, keys, handed, total)
	}
	mu.Lock()
	defer mu.Unlock()
	for key, id := range firstID {
		var stored string
		if err := pg.Pool.QueryRow(ctx, `SELECT id::text FROM inbox WHERE idempotency_key = $1`, key).Scan(&stored); err != nil || stored != id {
			t.Errorf("%s answered 202 with id %s, stored as %s (%v)", key, id, stored, err)
		}
	}
	testenv.Eventually(t, time.Minute, func() bool { return len(recv.deliveries()) >= total }, "the relay did not deliver the handed-on messages")
	metrics := testenv.Scrape(t, p.ManagementAddr())
	if n := testenv.Metric(metrics, `queuebox_inbox_received_total{outcome="accepted",source="orders"}`); n == 0 {
		t.Errorf("no accepted messages counted after the restart:\n%s", metrics)
	}
}

// writeInboxConfig writes the configuration of the SIGKILL test: a bearer
// HTTP source pushed to the outbox and relayed to the receiver at hooks.
func writeInboxConfig(t *testing.T, dbURL, hooks, addr string) string {
	t.Helper()
	cfg := fmt.Sprintf(`database:
  url: %q
server:
  listen: 127.0.0.1:0
relay:
  pollInterval: 20ms
  lease: 2s
destinations:
  hooks:
    type: http
    url: %s/hooks/{{ topic }}
routes:
  - topicPattern: "**"
    destination: hooks
inbox:
  listen: %s
  sources:
    orders:
      type: http
      auth: {scheme: bearer, secrets: [t0ken]}
      idempotencyKey: {header: Idempotency-Key}
      orderKey: {jsonPath: customer}
      topic: "orders.{{ source }}"
`, dbURL, hooks, addr)
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// senders post total webhooks, each until it is answered 202 or 200.
type senders struct {
	t        *testing.T
	addr     string
	total    int64
	next     atomic.Int64
	answered atomic.Int64
	mu       sync.Mutex
	firstID  map[string]string // key -> id of its 202
}

func (s *senders) post(key string, n int64) (int, string) {
	body := fmt.Sprintf(`{"customer":"c-%d","n":%d}`, n%40, n)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/inbox/orders", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t0ken")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var a struct{ ID string }
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &a)
	return resp.StatusCode, a.ID
}

// run sends messages until all are answered, retrying each while the
// server is down or refuses it for now, and repeats every tenth answered
// one (a sender that retries after a lost answer).
func (s *senders) run(ctx context.Context) {
	for {
		n := s.next.Add(1)
		if n > s.total {
			return
		}
		key := fmt.Sprintf("evt-%d", n)
		for ctx.Err() == nil {
			code, id := s.post(key, n)
			if code == http.StatusAccepted || code == http.StatusOK {
				s.mu.Lock()
				if prev, dup := s.firstID[key]; dup && code == http.StatusAccepted {
					s.t.Errorf("%s accepted twice: %s and %s", key, prev, id)
				} else if code == http.StatusAccepted {
					s.firstID[key] = id
				}
				s.mu.Unlock()
				s.answered.Add(1)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n%10 == 0 {
			if code, _ := s.post(key, n); code != http.StatusOK && code != 0 && code != http.StatusServiceUnavailable {
				s.t.Errorf("repeat of %s: %d, want 200", key, code)
			}
		}
	}
}

// TestInboxMigrate: run refuses an inbox whose table is missing, naming
// the fix; migrate with the inbox configured creates it; run then starts,
// and inbox.retention deletes the rows older than its maxAge.
func TestInboxMigrate(t *testing.T) {
	pg := testenv.Postgres(t)
	path := writeInboxOnlyConfig(t, pg.URL, `  retention: {maxAge: 1h}
  sources:
    github:
      type: http
      auth: {scheme: github, secrets: [s3cret]}
`)
	out, err := exec.Command(binPath, "run", "--config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "queuebox migrate") || !strings.Contains(string(out), "inbox") {
		t.Fatalf("run without the inbox table: %v\n%s", err, out)
	}
	out, _ = exec.Command(binPath, "check", "--config", path).CombinedOutput()
	if !strings.Contains(string(out), "FAIL  inbox.table inbox") {
		t.Errorf("check without the inbox table:\n%s", out)
	}
	out, err = exec.Command(binPath, "migrate", "--config", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "00001_create_inbox.sql") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	out, _ = exec.Command(binPath, "check", "--config", path).CombinedOutput()
	if !strings.Contains(string(out), "ok    inbox table inbox: 1 sources") {
		t.Errorf("check with the inbox table:\n%s", out)
	}
	ctx := testenv.Context(t, time.Minute)
	pg.MustExec(t, ctx, `INSERT INTO inbox (source, idempotency_key, topic, payload, state, updated_at, scheduled_at) VALUES
		('github', 'old', 'github', '{}', 'sent', now() - interval '2 hours', now() - interval '2 hours'), ('github', 'new', 'github', '{}', 'sent', now(), now())`)
	p := startQueuebox(t, "run", "--config", path)
	waitIngest(t, p)
	testenv.Eventually(t, 20*time.Second, func() bool {
		var keys []string
		rows, err := pg.Pool.Query(ctx, `SELECT idempotency_key FROM inbox`)
		if err != nil {
			return false
		}
		for rows.Next() {
			var k string
			_ = rows.Scan(&k)
			keys = append(keys, k)
		}
		return len(keys) == 1 && keys[0] == "new"
	}, "inbox.retention did not delete the old row alone")
	if code := p.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Logs())
	}
}

// TestOperatorCommandsOnTheInbox: with --inbox, stats, dead list and
// replay act on the inbox table; without it, on the outbox, which has
// none of those rows.
func TestOperatorCommandsOnTheInbox(t *testing.T) {
	pg := testenv.Postgres(t)
	path := writeInboxOnlyConfig(t, pg.URL, `  sources:
    orders: {type: http, auth: {scheme: bearer, secrets: [t0ken-for-test]}, idempotencyKey: {header: Idempotency-Key}, handoff: pull}
`)
	if out, err := exec.Command(binPath, "migrate", "--config", path).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	ctx := testenv.Context(t, time.Minute)
	var deadID string
	if err := pg.Pool.QueryRow(ctx, `INSERT INTO inbox (source, idempotency_key, topic, key, payload, state, attempt, last_error)
		VALUES ('orders', 'd1', 'orders', 'o-1', '{}', 'dead', 5, 'handler: refused') RETURNING id::text`).Scan(&deadID); err != nil {
		t.Fatal(err)
	}
	pg.MustExec(t, ctx, `INSERT INTO inbox (source, idempotency_key, topic, payload) VALUES ('orders', 'p1', 'orders', '{}')`)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binPath, append(args, "--config", path)...).Output()
		if err != nil {
			t.Fatalf("queuebox %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}

	var dead []map[string]any
	if err := json.Unmarshal([]byte(cli("dead", "list", "--inbox", "-o", "json")), &dead); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0]["id"] != deadID || dead[0]["lastError"] != "handler: refused" {
		t.Errorf("dead list --inbox: %v, want the inbox's dead row %s", dead, deadID)
	}
	if err := json.Unmarshal([]byte(cli("dead", "list", "-o", "json")), &dead); err != nil || len(dead) != 0 {
		t.Errorf("dead list without --inbox: %v (%v), want the outbox's none", dead, err)
	}
	var stats struct {
		States map[string]int64 `json:"states"`
	}
	if err := json.Unmarshal([]byte(cli("stats", "--inbox", "-o", "json")), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.States["pending"] != 1 || stats.States["dead"] != 1 {
		t.Errorf("stats --inbox counts %v, want 1 pending and 1 dead", stats.States)
	}
	cli("replay", "--inbox", "--id", deadID, "--yes")
	var state string
	var attempt int
	if err := pg.Pool.QueryRow(ctx, `SELECT state, attempt FROM inbox WHERE id = $1`, deadID).Scan(&state, &attempt); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || attempt != 0 {
		t.Errorf("after replay --inbox the row is %s at attempt %d, want pending at 0", state, attempt)
	}
}

// writeInboxOnlyConfig writes a config on the database at dbURL whose
// outbox routes to an unreachable webhook and whose inbox listens on a
// free loopback port, with the inbox keys given (indented by two).
func writeInboxOnlyConfig(t *testing.T, dbURL, inbox string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`database:
  url: %q
server:
  listen: ""
destinations:
  hooks: {type: http, url: "http://127.0.0.1:9/x"}
routes:
  - {topicPattern: "**", destination: hooks}
inbox:
  listen: 127.0.0.1:0
`, dbURL)+inbox)
}
