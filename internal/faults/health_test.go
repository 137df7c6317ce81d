package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestReadinessFollowsTheDatabase: /health/ready answers 200 with a JSON
// body per component, 503 naming the database while its connections are
// cut (through the proxy), and 200 again once they are back; /health/live
// stays 200 throughout. Part of make test (a few seconds).
func TestReadinessFollowsTheDatabase(t *testing.T) {
	pg := testenv.Postgres(t)
	u, err := neturl.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	proxy, err := NewProxy(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	url := strings.Replace(pg.URL, host, proxy.Addr(), 1)
	if !strings.Contains(url, proxy.Addr()) {
		t.Fatalf("could not point %s at the proxy", pg.URL)
	}
	recv := newReceiver(t)
	cfg := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
server:
  listen: 127.0.0.1:0
destinations:
  hooks:
    type: http
    url: "%s/{{ topic }}"
routes:
  - topicPattern: "**"
    destination: hooks
`, url, pg.Schema, recv.URL())
	path := filepath.Join(t.TempDir(), "health.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startQueuebox(t, "health", "run", "--config", path)
	addr := p.ManagementAddr()

	type health struct {
		Status     string `json:"status"`
		Components map[string]struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		} `json:"components"`
	}
	get := func(path string) (int, health) {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var h health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatalf("GET %s: body is not JSON: %v", path, err)
		}
		return resp.StatusCode, h
	}
	waitFor := func(code int) health {
		var h health
		testenv.Eventually(t, 20*time.Second, func() bool {
			var c int
			c, h = get("/health/ready")
			return c == code
		}, "/health/ready never answered %d (last: %+v)", code, h)
		return h
	}

	h := waitFor(http.StatusOK)
	if h.Components["database"].Status != "up" || h.Components["destination.hooks"].Status != "up" {
		t.Fatalf("ready body %+v: want database and destination.hooks up", h)
	}
	proxy.Cut()
	h = waitFor(http.StatusServiceUnavailable)
	if h.Status != "down" || h.Components["database"].Status != "down" || h.Components["database"].Error == "" {
		t.Fatalf("ready body while the database is cut: %+v", h)
	}
	if h.Components["destination.hooks"].Status != "up" {
		t.Fatalf("the destination should stay up while only the database is cut: %+v", h)
	}
	if c, _ := get("/health/live"); c != http.StatusOK {
		t.Fatalf("/health/live = %d while the database is cut, want 200", c)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(http.StatusOK)
}
