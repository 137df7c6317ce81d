package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestImage runs the image named by QUEUEBOX_TEST_IMAGE (make test-image
// builds it and sets it) the way a cluster would: as its own user, with a
// read-only root file system, on the host network against the local
// PostgreSQL and a webhook of the test's own. `migrate up` creates the
// table; `run` delivers rows; while the webhook is down /health/ready stays
// 200 and names the open circuit; /metrics has queuebox_build_info; SIGTERM
// exits 0 and leaves no row processing.
//
// QUEUEBOX_TEST_CONTAINER is the engine command (default: podman with runc
// and cgroupfs, which this machine needs); QUEUEBOX_TEST_RUN_FLAGS are
// added to every run (default: the host network and ulimits podman here
// accepts).
func TestImage(t *testing.T) {
	image := os.Getenv("QUEUEBOX_TEST_IMAGE")
	if image == "" {
		t.Skip("skipping: QUEUEBOX_TEST_IMAGE is not set (make test-image builds the image and runs this test)")
	}
	engine := strings.Fields(testenv.Env("QUEUEBOX_TEST_CONTAINER", "podman --runtime runc --cgroup-manager=cgroupfs"))
	runFlags := strings.Fields(testenv.Env("QUEUEBOX_TEST_RUN_FLAGS", "--network host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"))
	container := func(args ...string) *exec.Cmd {
		return exec.Command(engine[0], append(engine[1:], args...)...)
	}

	out, err := container("image", "inspect", "--format", "{{.Config.User}}", image).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", image, err)
	}
	user := strings.TrimSpace(string(out))
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Fatalf("image user %q: the image must not run as root", user)
	}

	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	hook := newWebhook(t)
	listen := freeAddr(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "queuebox.yaml")
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 50ms
  backoff: {base: 100ms, max: 1s}
  circuitBreaker: {failures: 1, openFor: 500ms, maxOpenFor: 1s}
server:
  listen: %s
destinations:
  hooks:
    type: http
    url: "%s/{{ topic }}"
    timeout: 2s
routes:
  - topicPattern: "**"
    destination: hooks
`, pg.URL, pg.Schema, listen, hook.URL())
	// The container's user (65532) reads it: world-readable.
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("queuebox-test-%d", time.Now().UnixNano())
	runArgs := func(name string, args ...string) []string {
		a := append(append([]string{}, engine[1:]...), "run", "--rm", "--name", name, "--read-only")
		a = append(a, runFlags...)
		a = append(a, "-v", cfg+":/etc/queuebox/queuebox.yaml:ro", image)
		return append(a, args...)
	}

	// migrate up, with the config at the image's default path.
	migrate := exec.Command(engine[0], runArgs(name+"-migrate", "migrate", "up")...)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	ctx := testenv.Context(t, 3*time.Minute)
	var tables int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'outbox'`, pg.Schema).Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("after migrate up: %d outbox tables in %s (%v)", tables, pg.Schema, err)
	}

	t.Cleanup(func() { _ = container("rm", "-f", name).Run() })
	p := testenv.Start(t, engine[0], "image", runArgs(name, "run")...)
	addr := p.ManagementAddr()
	insert := func(n int, prefix string) {
		t.Helper()
		pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload)
			SELECT 'hook.' || $1, 'k' || (i % 10), jsonb_build_object('n', i) FROM generate_series(1, $2::int) AS i`, prefix, n)
	}
	pendingOrProcessing := func() int {
		var n int
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state <> 'sent'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	insert(100, "first")
	testenv.Eventually(t, time.Minute, func() bool { return hook.count() >= 100 && pendingOrProcessing() == 0 },
		"the image delivered %d of 100 rows", hook.count())
	if code := readyCode(t, addr); code != http.StatusOK {
		t.Fatalf("/health/ready = %d with everything up, want 200", code)
	}

	// The webhook goes away: rows wait, the circuit opens, readiness holds.
	hook.stop()
	insert(20, "second")
	testenv.Eventually(t, time.Minute, func() bool {
		body := get(t, addr, "/health/ready")
		return strings.Contains(body, `"circuit": "open"`) || strings.Contains(body, `"circuit": "half-open"`)
	}, "the circuit of hooks never opened while the webhook was down: %s", get(t, addr, "/health/ready"))
	for range 5 {
		if code := readyCode(t, addr); code != http.StatusOK {
			t.Fatalf("/health/ready = %d while only the webhook is down, want 200: %s", code, get(t, addr, "/health/ready"))
		}
		time.Sleep(200 * time.Millisecond) // a few looks across the breaker's open and half-open turns
	}
	if m := get(t, addr, "/metrics"); !strings.Contains(m, "queuebox_build_info{") {
		t.Fatalf("/metrics has no queuebox_build_info:\n%s", testenv.Tail(m, 20))
	}

	hook.start(t)
	testenv.Eventually(t, time.Minute, func() bool { return pendingOrProcessing() == 0 },
		"after the webhook came back, %d rows are still not sent", pendingOrProcessing())

	insert(50, "third") // some of them in flight when SIGTERM lands
	if code := p.Stop(syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, testenv.Tail(p.Logs(), 20))
	}
	var processing int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'processing'`).Scan(&processing); err != nil {
		t.Fatal(err)
	}
	if processing != 0 {
		t.Fatalf("%d rows left processing after SIGTERM", processing)
	}
	t.Logf("image %s (user %s): 120 rows delivered, readiness 200 during the outage, SIGTERM exit 0, no row processing", image, user)
}

// webhook is an HTTP receiver on a fixed local port that can be stopped
// (connections refused) and started again on the same port.
type webhook struct {
	addr string
	mu   sync.Mutex
	n    int
	srv  *http.Server
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{addr: freeAddr(t)}
	w.start(t)
	t.Cleanup(w.stop)
	return w
}

func (w *webhook) URL() string { return "http://" + w.addr }

func (w *webhook) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	testenv.Eventually(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", w.addr)
		return err == nil
	}, "listen on %s again", w.addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Message-Id") == "" {
			http.Error(rw, "no X-Message-Id", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.n++
		w.mu.Unlock()
	})}
	w.mu.Lock()
	w.srv = srv
	w.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (w *webhook) stop() {
	w.mu.Lock()
	srv := w.srv
	w.srv = nil
	w.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (w *webhook) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func readyCode(t *testing.T, addr string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/health/ready")
	if err != nil {
		t.Fatalf("GET /health/ready: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, addr, path string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return b.String()
}
