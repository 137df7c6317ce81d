package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestReadinessDuringDestinationOutage: with a webhook that refuses every
// connection, the destination's circuit opens. By default /health/ready
// stays 200 ("degraded", the open circuit in the body and in
// queuebox_destination_circuit_state), so an outage does not make every
// replica unready; with server.readiness: strict it answers 503.
func TestReadinessDuringDestinationOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		readiness  string
		wantCode   int
		wantStatus string
	}{
		{"database", http.StatusOK, "degraded"},
		{"strict", http.StatusServiceUnavailable, "down"},
	} {
		t.Run(tc.readiness, func(t *testing.T) {
			t.Parallel()
			pg := testenv.Postgres(t)
			cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  circuitBreaker: {failures: 1, openFor: 1m}
server:
  listen: 127.0.0.1:0
  readiness: %s
destinations:
  hooks:
    type: http
    url: "http://%s/{{ topic }}"
routes:
  - topicPattern: "**"
    destination: hooks
`, pg.URL, pg.Schema, tc.readiness, testenv.ClosedPort(t)))
			p := startQueuebox(t, "run", "--config", cfg)
			addr := p.ManagementAddr()
			pg.MustExec(t, context.Background(), `INSERT INTO outbox (topic, payload) VALUES ('hook.a', '{}'), ('hook.b', '{}')`)

			var (
				code int
				body readyBody
			)
			testenv.Eventually(t, 30*time.Second, func() bool {
				code, body = getReady(t, addr)
				return body.Components["destination.hooks"].Circuit == "open"
			}, "the circuit of hooks never opened: %d %+v", code, body)
			if code != tc.wantCode || body.Status != tc.wantStatus || body.Readiness != tc.readiness {
				t.Errorf("/health/ready = %d %+v, want %d with status %q and readiness %q", code, body, tc.wantCode, tc.wantStatus, tc.readiness)
			}
			if db := body.Components["database"]; db.Status != "up" {
				t.Errorf("database component %+v, want up", db)
			}
			if h := body.Components["destination.hooks"]; h.Status != "down" {
				t.Errorf("destination.hooks %+v, want down", h)
			}
			metrics := testenv.Scrape(t, addr)
			if v := testenv.Metric(metrics, `queuebox_destination_circuit_state{destination="hooks"}`); v != 1 {
				t.Errorf("queuebox_destination_circuit_state = %v, want 1 (open)", v)
			}
			if c, _ := getReady(t, addr); tc.readiness == "database" && c != http.StatusOK {
				t.Errorf("/health/ready = %d on a second look, want 200", c)
			}
		})
	}
}

// TestBuildInfoMetric: the running relay exposes queuebox_build_info with
// the labels `queuebox version` prints.
func TestBuildInfoMetric(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
server:
  listen: 127.0.0.1:0
destinations:
  hooks:
    type: http
    url: "http://%s/{{ topic }}"
routes:
  - topicPattern: "**"
    destination: hooks
`, pg.URL, pg.Schema, testenv.ClosedPort(t)))
	p := startQueuebox(t, "run", "--config", cfg)
	metrics := testenv.Scrape(t, p.ManagementAddr())
	out, err := exec.Command(binPath, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var b buildInfo
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	series := fmt.Sprintf(`queuebox_build_info{goversion=%q,revision=%q,version=%q}`, b.GoVersion, b.Revision, b.Version)
	if v, ok := testenv.LookupMetric(metrics, series); !ok || v != 1 {
		t.Errorf("%s = %v (found %v), want 1", series, v, ok)
	}
}

func getReady(t *testing.T, addr string) (int, readyBody) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/health/ready")
	if err != nil {
		t.Fatalf("GET /health/ready: %v", err)
	}
	defer resp.Body.Close()
	var body readyBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/health/ready: body is not JSON: %v", err)
	}
	return resp.StatusCode, body
}
