package main

import (
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
`, pg.URL, recv.srv.URL, addr)
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startQueuebox(t, "run", "--config", path)
	waitIngest(t, p)

	const total, clients = 1200, 16
	var next, answered atomic.Int64
	var mu sync.Mutex
	firstID := map[string]string{} // key -> id of its 202
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(key string, n int64) (int, string) {
		body := fmt.Sprintf(`{"customer":"c-%d","n":%d}`, n%40, n)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/inbox/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t0ken")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var a struct{ ID string }
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &a)
		return resp.StatusCode, a.ID
	}
	ctx := testenv.Context(t, 2*time.Minute)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > total {
					return
				}
				key := fmt.Sprintf("evt-%d", n)
				for ctx.Err() == nil {
					code, id := post(key, n)
					if code == http.StatusAccepted || code == http.StatusOK {
						mu.Lock()
						if code == http.StatusAccepted {
							if prev, dup := firstID[key]; dup {
								t.Errorf("%s accepted twice: %s and %s", key, prev, id)
							}
							firstID[key] = id
						}
						mu.Unlock()
						answered.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond) // down, or refused while starting: retry
				}
				if n%10 == 0 { // a sender that repeats an answered message
					if code, _ := post(key, n); code != http.StatusOK && code != 0 && code != http.StatusServiceUnavailable {
						t.Errorf("repeat of %s: %d, want 200", key, code)
					}
				}
			}
		}()
	}
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
}

// TestInboxMigrate: run refuses an inbox whose table is missing, naming
// the fix; migrate with the inbox configured creates it; run then starts.
func TestInboxMigrate(t *testing.T) {
	pg := testenv.Postgres(t)
	cfg := fmt.Sprintf(`database:
  url: %q
server:
  listen: ""
destinations:
  hooks: {type: http, url: "http://127.0.0.1:9/x"}
routes:
  - {topicPattern: "**", destination: hooks}
inbox:
  listen: 127.0.0.1:0
  sources:
    github:
      type: http
      auth: {scheme: github, secrets: [s3cret]}
`, pg.URL)
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binPath, "run", "--config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "queuebox migrate") || !strings.Contains(string(out), "inbox") {
		t.Fatalf("run without the inbox table: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, "migrate", "--config", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "00001_create_inbox.sql") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	p := startQueuebox(t, "run", "--config", path)
	waitIngest(t, p)
	if code := p.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Logs())
	}
}
