package faults

// Hostile and malformed input against the built binary. These run in every
// `make test` (a few seconds): each outcome must be clear and lose no row.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestHostileRowsGoDeadWithAReason: headers that are not an object of
// strings, a payload above the NATS max_payload, and a topic matching no
// route each go dead at once with a reason; a good row beside them is
// delivered.
func TestHostileRowsGoDeadWithAReason(t *testing.T) {
	resetKeys()
	srv := testenv.EmbeddedNATS(t, "", -1) // default max_payload: 1 MiB
	w := newWorld(t, worldOptions{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", testenv.EmbeddedNATSPort(srv))})
	ctx := testenv.Context(t, time.Minute)
	big := fmt.Sprintf(`{"n": 0, "blob": "%s"}`, strings.Repeat("x", 2<<20))
	for _, q := range []struct{ topic, key, payload, headers string }{
		{"order.created", "bad-headers-1", `{"n": 0}`, `[1, 2]`},
		{"order.created", "bad-headers-2", `{"n": 0}`, `{"trace": 42}`},
		{"order.created", "too-big", big, `{}`},
		{"nowhere.created", "no-route", `{"n": 0}`, `{}`},
		{"order.created", "good", `{"n": 0}`, `{"trace": "abc"}`},
	} {
		if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, $3::jsonb, $4::jsonb)`, q.topic, q.key, q.payload, q.headers); err != nil {
			t.Fatal(err)
		}
	}
	p := startQueuebox(t, "relay", "run", "--config", w.config("pollInterval: 20ms", ""))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	want := map[string][]string{
		"bad-headers-1": {"dead", "malformed headers", "not a JSON object"},
		"bad-headers-2": {"dead", "malformed headers", `"trace" is not a string`},
		"too-big":       {"dead", "max_payload"},
		"no-route":      {"dead", "nowhere.created"},
		"good":          {"sent"},
	}
	rows, err := w.pg.Pool.Query(ctx, `SELECT key, state, attempt, coalesce(last_error, '') FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, state, lastErr string
		var attempt int
		if err := rows.Scan(&key, &state, &attempt, &lastErr); err != nil {
			t.Fatal(err)
		}
		w := want[key]
		if state != w[0] {
			t.Errorf("%s: state %s, want %s (last_error %q)", key, state, w[0], lastErr)
		}
		for _, s := range w[1:] {
			if !strings.Contains(lastErr, s) {
				t.Errorf("%s: last_error %q does not mention %q", key, lastErr, s)
			}
		}
		if state == "dead" && attempt > 1 {
			t.Errorf("%s: dead after %d attempts, want at once", key, attempt)
		}
		t.Logf("%-14s %-5s attempt=%d last_error=%.160q", key, state, attempt, lastErr)
	}
}

// TestHostileTableNamesRejectedAtStart: table and column names that try to
// inject SQL stop the start with exit 1 naming the setting.
func TestHostileTableNamesRejectedAtStart(t *testing.T) {
	dir := t.TempDir()
	base := `database:
  url: postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2
  outboxTable: %s
  columns: %s
destinations:
  hooks:
    type: http
    url: http://127.0.0.1:9/x
routes:
  - topicPattern: "**"
    destination: hooks
`
	cases := []struct{ name, table, columns, want string }{
		{"table", `"outbox; drop table x"`, `{}`, "database.outboxTable"},
		{"schema", `"public.outbox; drop table x --"`, `{}`, "database.outboxTable"},
		{"quote", `"outbox\" OR 1=1"`, `{}`, "database.outboxTable"},
		{"column", `outbox`, `{payload: "payload); drop table x; --"}`, "database.columns"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(path, []byte(fmt.Sprintf(base, tc.table, tc.columns)), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmdName := range []string{"run", "check"} {
				cmd := exec.Command(queuebox(t), cmdName, "--config", path)
				cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
				out, _ := cmd.CombinedOutput()
				if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), tc.want) {
					t.Fatalf("%s: exit %d, want 1 naming %s:\n%s", cmdName, code, tc.want, out)
				}
			}
		})
	}
}

// TestSecretsNeverLeak runs the relay with a database password in the URL,
// an HTTP bearer token, basic-auth credentials, a token in an HTTP URL and
// a token in a static header, drives failures that carry them (a 500 whose
// body echoes the token, one that echoes the header's token across the
// 256th byte, where the error's snippet of the body is cut, an
// unreachable destination), then greps the process output, last_error
// and a /metrics scrape for every secret, and for the first bytes (4 or
// more) of the one at the cut.
func TestSecretsNeverLeak(t *testing.T) {
	resetKeys()
	const (
		dbPassword = "Pg-S3cret-pw-77"
		bearer     = "tok-B3arer-secret-91"
		basicUser  = "hookuser"
		basicPass  = "B4sic-secret-pw-13"
		urlToken   = "Url-t0ken-secret-55"
		hdrToken   = "HdrSecret-t0ken-83"
	)
	w := newWorld(t, worldOptions{})
	// Trust authentication ignores the password, but it is in the URL the
	// relay parses, logs around and may put into errors.
	withPassword := strings.Replace(w.pg.URL, "postgres@", "postgres:"+dbPassword+"@", 1)
	if withPassword == w.pg.URL {
		t.Skipf("cannot place a password in %s", w.pg.URL)
	}
	echo := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hdr" {
			// The header's token starts 8 bytes before the 256th byte
			// of the body: cut there before redaction, "HdrSecre" is
			// left (and "tok=" is no pattern the redactor knows).
			rw.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(rw, "%stok=%s; and more text after it %s", strings.Repeat("p", 256-8-len("tok=")), r.Header.Get("X-Api-Token"), strings.Repeat("q", 300))
			return
		}
		// A receiver that echoes what it got, credentials included.
		http.Error(rw, fmt.Sprintf("upstream failure; auth=%q url=%q", r.Header.Get("Authorization"), r.URL.String()), http.StatusInternalServerError)
	}))
	t.Cleanup(echo.Close)
	closed := testenv.ClosedPort(t)
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
  maxAttempts: 2
  backoff: {base: 50ms, max: 200ms}
server:
  listen: 127.0.0.1:0
log:
  level: debug
destinations:
  echo:
    type: http
    url: "%s/hooks/{{ topic }}?token=%s"
    auth: {bearer: %q}
  basic:
    type: http
    url: "%s/basic?access_token=%s"
    auth: {username: %q, password: %q}
  gone:
    type: http
    url: "http://%s:%s@%s/gone"
    timeout: 1s
  hdr:
    type: http
    url: "%s/hdr"
    headers: {X-Api-Token: %q}
routes:
  - topicPattern: "echo.*"
    destination: echo
  - topicPattern: "basic.*"
    destination: basic
  - topicPattern: "gone.*"
    destination: gone
  - topicPattern: "hdr.*"
    destination: hdr
`, withPassword, w.pg.Schema, echo.URL, urlToken, bearer, echo.URL, urlToken, basicUser, basicPass, basicUser, basicPass, closed, echo.URL, hdrToken)
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	for _, topic := range []string{"echo.created", "basic.created", "gone.created", "echo.other", "basic.other", "gone.other", "hdr.created", "hdr.other"} {
		if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, max_attempts) VALUES ($1, $1, '{"n": 0}', 2)`, topic); err != nil {
			t.Fatal(err)
		}
	}
	p := startQueuebox(t, "relay", "run", "--config", path)
	addr := p.ManagementAddr()
	// echo and basic rows die after two 500s; gone rows are deferred
	// (connection refused) without spending attempts: wait for the former
	// and for at least one deferral of the latter.
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		_ = w.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'dead' OR (topic LIKE 'gone.%' AND last_error IS NOT NULL)`).Scan(&n)
		return n == 8
	}, "failures not recorded")
	metricsText := testenv.Scrape(t, addr)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	var lastErrors []string
	rows, err := w.pg.Pool.Query(ctx, `SELECT coalesce(last_error, '') FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		lastErrors = append(lastErrors, s)
	}
	rows.Close()
	places := map[string]string{"logs": p.Logs(), "last_error": strings.Join(lastErrors, "\n"), "metrics": metricsText}
	for where, text := range places {
		for _, secret := range []string{dbPassword, bearer, basicPass, urlToken, hdrToken, base64.StdEncoding.EncodeToString([]byte(basicUser + ":" + basicPass))} {
			if strings.Contains(text, secret) {
				i := strings.Index(text, secret)
				t.Errorf("secret %q found in %s: ...%s...", secret, where, text[max(0, i-120):min(len(text), i+len(secret)+40)])
			}
		}
		for k := len(hdrToken) - 1; k >= 4; k-- {
			if i := strings.Index(text, hdrToken[:k]); i >= 0 {
				t.Errorf("the first %d bytes of the header's token (%q) found in %s: ...%s...", k, hdrToken[:k], where, text[max(0, i-120):min(len(text), i+k+40)])
				break
			}
		}
	}
	if !strings.Contains(places["last_error"], "tok=xxxxx") {
		t.Errorf("last_error does not show the masked token of the echoed header: %q", places["last_error"])
	}
	if !strings.Contains(places["last_error"], "500") {
		t.Errorf("last_error does not show the failures it should: %q", places["last_error"])
	}
	t.Logf("last_error samples:\n%s", strings.Join(lastErrors, "\n"))
	_ = context.Background
}
