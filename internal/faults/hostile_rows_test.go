package faults

// Rows are untrusted input (docs/security.md): written by application code,
// often from what users typed. These tests replay, against the real
// services and the built binary, what a row could do to how it or another
// row is delivered, and what an operator could feed the CLI by mistake.

import (
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

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/internal/testenv"
)

// writeConfig writes yml to a file of the test's own and returns its path.
func writeConfig(t *testing.T, yml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCLI runs the built binary with args and returns its exit status and
// combined output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(queuebox(t), args...)
	cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// rowState reads the state, attempt and last_error of the row with key.
func rowState(t *testing.T, w *world, key string) (state string, attempt int, lastErr string) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	if err := w.pg.Pool.QueryRow(ctx, `SELECT state, attempt, coalesce(last_error, '') FROM outbox WHERE key = $1`, key).Scan(&state, &attempt, &lastErr); err != nil {
		t.Fatalf("row %q: %v", key, err)
	}
	return state, attempt, lastErr
}

func insertRow(t *testing.T, w *world, topic, key, payload, headers string) string {
	t.Helper()
	var id string
	if err := w.pg.Pool.QueryRow(testenv.Context(t, 10*time.Second),
		`INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, $3::jsonb, $4::jsonb) RETURNING id::text`,
		topic, key, payload, headers).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestHostileNATSHeadersCannotDefeatDeduplication: on nats-server 2.9 (the
// Debian package, the shared test server), a row header X-Nats-Msg-Id, or
// any header whose value holds the text Nats-Msg-Id, written before the
// real Nats-Msg-Id in the header block, hid it from the server: every
// redelivery was stored again. The row is replayed 12 times; the stream,
// with its duplicate window, must hold one message. The dropped headers
// are counted and logged by name, never by value.
func TestHostileNATSHeadersCannotDefeatDeduplication(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: 127.0.0.1:0
log:
  level: debug
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
    stream: %s
routes:
  - topicPattern: "**"
    destination: events
`, w.dbURL, w.pg.Schema, w.natsURL, w.subject, w.stream)
	cfg := writeConfig(t, yml)
	id := insertRow(t, w, "order.created", "dedup", `{"n": 0}`,
		`{"X-Nats-Msg-Id": "forged-value-1", "X-Note": "see Nats-Msg-Id", "trace": "abc"}`)
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	waitState := func(want string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() bool { s, _, _ := rowState(t, w, "dedup"); return s == want }, "row not %s", want)
	}
	waitState("sent")
	const replays = 12
	for i := range replays {
		if code, out := runCLI(t, "replay", "--config", cfg, "--state", "sent", "--id", id, "--yes"); code != 0 || !strings.Contains(out, "replayed 1 rows") {
			t.Fatalf("replay %d: exit %d: %s", i+1, code, out)
		}
		waitState("sent")
	}
	metrics := testenv.Scrape(t, addr)
	p.Stop(syscall.SIGTERM, 30*time.Second)

	msgs := w.streamMessages()
	if len(msgs) != 1 {
		t.Fatalf("the stream holds %d copies of the row after %d replays, want 1 (deduplicated on Nats-Msg-Id)", len(msgs), replays)
	}
	if msgs[0].ID != id {
		t.Errorf("stored Nats-Msg-Id %q, want the row id %s", msgs[0].ID, id)
	}
	dropped := testenv.Metric(metrics, `queuebox_row_headers_dropped_total{destination="events"}`)
	if dropped < 2*(replays+1) {
		t.Errorf("queuebox_row_headers_dropped_total = %v, want at least %d (two headers per publish)", dropped, 2*(replays+1))
	}
	logs := p.Logs()
	if !strings.Contains(logs, "X-Nats-Msg-Id") || !strings.Contains(logs, "row header dropped") {
		t.Errorf("no debug line names the dropped header:\n%s", testenv.Tail(logs, 20))
	}
	if strings.Contains(logs, "forged-value-1") {
		t.Errorf("the log shows a dropped header's value")
	}
}

// TestHostileNATSExpectationHeadersIgnored: JetStream's publish
// expectations and rollup in row headers (Nats-Expected-Stream with a
// wrong stream, Nats-Expected-Last-Sequence, Nats-Rollup on a stream that
// does not allow rollups) failed every attempt of the row and then made it
// dead. They are dropped: each row is stored at its first attempt.
func TestHostileNATSExpectationHeadersIgnored(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	for key, headers := range map[string]string{
		"expected-stream": `{"Nats-Expected-Stream": "NO_SUCH_STREAM"}`,
		"expected-seq":    `{"Nats-Expected-Last-Sequence": "424242"}`,
		"rollup":          `{"Nats-Rollup": "sub"}`,
		"plain":           `{"trace": "abc"}`,
	} {
		insertRow(t, w, "order.created", key, `{"n": 0}`, headers)
	}
	p := startQueuebox(t, "relay", "run", "--config", w.config("pollInterval: 20ms\nmaxAttempts: 2\nbackoff: {base: 50ms, max: 100ms}", ""))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	for _, key := range []string{"expected-stream", "expected-seq", "rollup", "plain"} {
		if state, attempt, lastErr := rowState(t, w, key); state != "sent" || attempt != 0 {
			t.Errorf("%s: %s at attempt %d (%s), want sent at the first attempt", key, state, attempt, lastErr)
		}
	}
	if n := len(w.streamMessages()); n != 4 {
		t.Errorf("the stream holds %d messages, want 4", n)
	}
}

// TestHostileURLValuesStayInTheirPlace: row values rendered into an HTTP
// URL are escaped for where they land: the key ../../admin/delete?all=true#x
// requests /hooks/..%2F..%2Fadmin%2Fdelete%3Fall=true%23x (not
// /admin/delete), ".." cannot form a dot-segment, and a query value cannot
// add parameters.
func TestHostileURLValuesStayInTheirPlace(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.Host+" "+r.RequestURI)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: ""
destinations:
  hooks:
    type: http
    url: "%s/hooks/{{ key }}?tenant={{ payload.tenant }}"
routes:
  - topicPattern: "**"
    destination: hooks
`, w.dbURL, w.pg.Schema, srv.URL)
	insertRow(t, w, "hook.created", "../../admin/delete?all=true#x", `{"tenant": "a&admin=1"}`, `{}`)
	insertRow(t, w, "hook.created", "..", `{"tenant": "t"}`, `{}`)
	p := startQueuebox(t, "relay", "run", "--config", writeConfig(t, yml))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)

	mu.Lock()
	got := strings.Join(uris, "\n")
	mu.Unlock()
	for _, want := range []string{
		" /hooks/..%2F..%2Fadmin%2Fdelete%3Fall=true%23x?tenant=a%26admin%3D1",
		" /hooks/%2E%2E?tenant=t",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no request for %q; requests:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n") != 1 {
		t.Errorf("requests:\n%s\nwant exactly the two above", got)
	}
}

// TestHostileTemplatedHostNeedsAllowedHosts: a url whose host is rendered
// from the row is refused at start unless allowedHosts lists the hosts it
// may send to; with it, a row rendering another host (or one that smuggles
// a user name) is dead at once with the reason, before any request.
func TestHostileTemplatedHostNeedsAllowedHosts(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	var mu sync.Mutex
	var hosts []string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	base := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: ""
destinations:
  tenants:
    type: http
    url: "http://{{ payload.host }}:%s/t/{{ key }}"
ALLOWED
routes:
  - topicPattern: "**"
    destination: tenants
`, w.dbURL, w.pg.Schema, u.Port())
	code, out := runCLI(t, "check", "--config", writeConfig(t, strings.Replace(base, "ALLOWED", "", 1)))
	if code != 1 || !strings.Contains(out, "allowedHosts") {
		t.Errorf("check of a templated host without allowedHosts: exit %d, want 1 naming allowedHosts:\n%s", code, out)
	}
	insertRow(t, w, "tenant.created", "t-ok", `{"host": "127.0.0.1"}`, `{}`)
	insertRow(t, w, "tenant.created", "t-evil", `{"host": "localhost"}`, `{}`)
	insertRow(t, w, "tenant.created", "t-user", `{"host": "127.0.0.1@localhost"}`, `{}`)
	p := startQueuebox(t, "relay", "run", "--config", writeConfig(t, strings.Replace(base, "ALLOWED", "    allowedHosts: [127.0.0.1]", 1)))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	for key, want := range map[string]string{"t-evil": "not in allowedHosts", "t-user": "host cannot hold"} {
		if state, attempt, lastErr := rowState(t, w, key); state != "dead" || attempt > 1 || !strings.Contains(lastErr, want) {
			t.Errorf("%s: %s at attempt %d (%q), want dead at once, %q", key, state, attempt, lastErr, want)
		}
	}
	if state, _, lastErr := rowState(t, w, "t-ok"); state != "sent" {
		t.Errorf("t-ok: %s (%s), want sent", state, lastErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hosts) != 1 || hosts[0] != "127.0.0.1:"+u.Port() {
		t.Errorf("requests to %v, want one to 127.0.0.1", hosts)
	}
}

// TestHostileAddressValuesCannotAddTokens: a value rendered into a NATS
// subject or an AMQP routing key is one token: a key x.y.z (or one holding
// a wildcard or whitespace) makes its row dead at once with the reason,
// instead of publishing to a subject or routing key of more tokens; the
// rows beside it are delivered.
func TestHostileAddressValuesCannotAddTokens(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	amqpURL := testenv.AMQPURL(t)
	admin := testenv.NewAMQPAdmin(t, amqpURL)
	exchange := testenv.AMQPName(t, "hostile")
	admin.Exchange(exchange, "topic")
	queue := admin.Queue("hostile", exchange, "#")
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: ""
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.keys.{{ key }}"
    stream: %s
  billing:
    type: amqp
    url: %q
    exchange: %s
    routingKey: "billing.{{ key }}"
routes:
  - topicPattern: "order.*"
    destination: events
  - topicPattern: "payment.*"
    destination: billing
`, w.dbURL, w.pg.Schema, w.natsURL, w.subject, w.stream, amqpURL, exchange)
	for _, k := range []string{"x.y.z", "a*", ">", "good-1"} {
		insertRow(t, w, "order.created", "n:"+k, `{"n": 0}`, `{}`)
	}
	for _, k := range []string{"eu.west", "#", "good-2"} {
		insertRow(t, w, "payment.captured", "a:"+k, `{"n": 0}`, `{}`)
	}
	p := startQueuebox(t, "relay", "run", "--config", writeConfig(t, yml))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	for key, want := range map[string]string{
		"n:x.y.z": `holds "."`, "n:a*": "wildcard", "n:>": "wildcard",
		"a:eu.west": `holds "."`, "a:#": "wildcard",
	} {
		state, attempt, lastErr := rowState(t, w, key)
		if state != "dead" || attempt > 1 || !strings.Contains(lastErr, want) || !strings.Contains(lastErr, "Tokens: allow") {
			t.Errorf("%s: %s at attempt %d (%q), want dead at once, %q, naming the setting", key, state, attempt, lastErr, want)
		}
	}
	for _, key := range []string{"n:good-1", "a:good-2"} {
		if state, _, lastErr := rowState(t, w, key); state != "sent" {
			t.Errorf("%s: %s (%s), want sent", key, state, lastErr)
		}
	}
	msgs := w.streamMessages()
	if len(msgs) != 1 || msgs[0].Key != "n:good-1" {
		t.Errorf("stream holds %+v, want the good row only", msgs)
	}
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			break
		}
		keys = append(keys, d.RoutingKey)
	}
	if len(keys) != 1 || keys[0] != "billing.a:good-2" {
		t.Errorf("the queue got routing keys %q, want the good row's only", keys)
	}
}

// TestHostileRowHeadersCannotSteerRabbitMQOrHTTP: RabbitMQ's CC header in a
// row routed a copy to another queue (or, as a string, closed the channel
// and failed the row); hop-by-hop headers reached the webhook. Both are
// dropped: the row is delivered once, where its route says, without them.
func TestHostileRowHeadersCannotSteerRabbitMQOrHTTP(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	amqpURL := testenv.AMQPURL(t)
	admin := testenv.NewAMQPAdmin(t, amqpURL)
	exchange := testenv.AMQPName(t, "steer")
	admin.Exchange(exchange, "direct")
	main := admin.Queue("main", exchange, "payment.captured")
	other := admin.Queue("other", exchange, "other")
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
  maxAttempts: 2
  backoff: {base: 50ms, max: 100ms}
server:
  listen: ""
destinations:
  billing:
    type: amqp
    url: %q
    exchange: %s
  hooks:
    type: http
    url: "%s/hooks"
routes:
  - topicPattern: "payment.*"
    destination: billing
  - topicPattern: "**"
    destination: hooks
`, w.dbURL, w.pg.Schema, amqpURL, exchange, srv.URL)
	insertRow(t, w, "payment.captured", "cc", `{"n": 0}`, `{"CC": "other", "x-delay": "60000", "tenant": "acme"}`)
	insertRow(t, w, "hook.created", "hop", `{"n": 0}`, `{"Upgrade": "h2c", "Proxy-Authorization": "Basic cm93OnNlY3JldA==", "Keep-Alive": "timeout=600", "X-Good": "yes"}`)
	p := startQueuebox(t, "relay", "run", "--config", writeConfig(t, yml))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	for _, key := range []string{"cc", "hop"} {
		if state, attempt, lastErr := rowState(t, w, key); state != "sent" || attempt != 0 {
			t.Errorf("%s: %s at attempt %d (%s), want sent at once", key, state, attempt, lastErr)
		}
	}
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	count := func(q string) (n int, headers amqp091.Table) {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				return n, headers
			}
			n, headers = n+1, d.Headers
		}
	}
	n, headers := count(main)
	if n != 1 || headers["CC"] != nil || headers["x-delay"] != nil || headers["tenant"] != "acme" {
		t.Errorf("main queue: %d messages, headers %v; want one, without CC and x-delay", n, headers)
	}
	if n, _ := count(other); n != 0 {
		t.Errorf("the queue named by the row's CC got %d messages, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range []string{"Upgrade", "Proxy-Authorization", "Keep-Alive"} {
		if v := got.Get(h); v != "" {
			t.Errorf("the webhook got the row's %s: %q", h, v)
		}
	}
	if got.Get("X-Good") != "yes" {
		t.Errorf("the webhook got headers %v, want X-Good", got)
	}
}

// TestHostileKeyWithControlCharactersArrivesEncoded: a key with control
// characters (a line break that would inject a header, a SOH) is not a
// reason to kill the row, nor to send it empty: the webhook gets it
// percent-encoded in X-Message-Key with X-Message-Key-Encoding: percent,
// and no injected header.
func TestHostileKeyWithControlCharactersArrivesEncoded(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	var mu sync.Mutex
	got := map[string]http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("X-Message-Id")] = r.Header.Clone()
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: ""
destinations:
  hooks:
    type: http
    url: "%s/hooks"
routes:
  - topicPattern: "**"
    destination: hooks
`, w.dbURL, w.pg.Schema, srv.URL)
	keys := []string{"k\x01\r\nX-Injected: yes", "tab\tand\x7fdel", " padded ", "plain-key"}
	ids := map[string]string{}
	for _, k := range keys {
		ids[k] = insertRow(t, w, "hook.created", k, `{"n": 0}`, `{}`)
	}
	p := startQueuebox(t, "relay", "run", "--config", writeConfig(t, yml))
	waitSettled(t, w.pg.Pool, time.Minute)
	p.Stop(syscall.SIGTERM, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if state, _, lastErr := rowState(t, w, k); state != "sent" {
			t.Errorf("key %q: %s (%s), want sent", k, state, lastErr)
			continue
		}
		h := got[ids[k]]
		enc, raw := h.Get("X-Message-Key-Encoding"), h.Get("X-Message-Key")
		dec := raw
		if enc == "percent" {
			dec, _ = url.PathUnescape(raw)
		}
		if dec != k || (k == "plain-key") != (enc == "") || h.Get("X-Injected") != "" {
			t.Errorf("key %q arrived as %q (encoding %q, X-Injected %q)", k, raw, enc, h.Get("X-Injected"))
		}
	}
}

// TestHostileOversizedConfigRefused: a configuration file above 1 MiB is
// refused before it is parsed (a 50 MB file once parsed at 400 MB RSS), by
// every command, with its size and the limit.
func TestHostileOversizedConfigRefused(t *testing.T) {
	const size = 8 << 20
	yml := `database:
  url: postgres://postgres@127.0.0.1:1/postgres
destinations:
  hooks: {type: http, url: "http://127.0.0.1:9/x"}
routes:
  - {topicPattern: "**", destination: hooks}
`
	var b strings.Builder
	b.WriteString(yml)
	for b.Len() < size {
		b.WriteString("# " + strings.Repeat("padding ", 15) + "\n")
	}
	path := writeConfig(t, b.String())
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check"}, {"run"}, {"dead", "list"}} {
		start := time.Now()
		code, out := runCLI(t, append(args, "--config", path)...)
		if code != 1 || !strings.Contains(out, fmt.Sprintf("%d bytes", st.Size())) || !strings.Contains(out, "limit of 1048576 bytes") {
			t.Errorf("%v: exit %d, want 1 naming the size (%d bytes) and the limit:\n%s", args, code, st.Size(), out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v took %v", args, d)
		}
	}
}

// TestHostileTimeFiltersUseTheDatabaseClock: dead list --since and replay
// --since/--until given as durations count back from the database's clock,
// the one updated_at was written with. The database's now() is skewed 3
// hours behind this host's (a function now() earlier on the CLI's
// search_path); a row that died 30 minutes ago by the database's clock is
// listed by --since 1h, one that died 2 hours ago is not, and replay
// selects the same way. Counted on this host's clock, both bounds were off
// by the skew.
func TestHostileTimeFiltersUseTheDatabaseClock(t *testing.T) {
	resetKeys()
	w := newWorld(t, worldOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := w.pg.Pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %q.now() RETURNS timestamptz LANGUAGE sql STABLE
		AS $$ SELECT pg_catalog.now() - interval '3 hours' $$`, w.pg.Schema)); err != nil {
		t.Fatal(err)
	}
	skewed := testenv.WithSearchPath(w.pg.URL, w.pg.Schema+",pg_catalog")
	for key, ago := range map[string]string{"recent": "30 minutes", "old": "2 hours"} {
		if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, state, last_error, updated_at)
			VALUES ('order.created', $1, '{}', 'dead', 'boom', pg_catalog.now() - interval '3 hours' - $2::interval)`, key, ago); err != nil {
			t.Fatal(err)
		}
	}
	var dbNow time.Time
	conn, err := w.pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The skew is there for a connection with the CLI's search_path.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`SET search_path = %q, pg_catalog`, w.pg.Schema)); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	if skew := time.Since(dbNow); skew < 2*time.Hour {
		t.Fatalf("the database clock is %v behind, want about 3h", skew)
	}
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
destinations:
  hooks: {type: http, url: "http://127.0.0.1:9/x"}
routes:
  - {topicPattern: "**", destination: hooks}
`, skewed, w.pg.Schema))

	code, out := runCLI(t, "dead", "list", "--config", cfg, "--since", "1h", "-o", "json")
	var rows []struct {
		Key string `json:"key"`
	}
	if i := strings.Index(out, "["); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &rows) != nil {
		t.Fatalf("dead list: exit %d: %s", code, out)
	}
	if len(rows) != 1 || rows[0].Key != "recent" {
		t.Errorf("dead list --since 1h: %+v, want the row that died 30 minutes ago by the database's clock", rows)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "1h"}, "would replay 1 rows"},  // recent
		{[]string{"--until", "1h"}, "would replay 1 rows"},  // old
		{[]string{"--since", "3h"}, "would replay 2 rows"},  // both
		{[]string{"--until", "10m"}, "would replay 2 rows"}, // both
		{[]string{"--since", "2h30m", "--until", "1h"}, "would replay 1 rows"},
		{[]string{"--since", dbNow.Add(-time.Hour).Format(time.RFC3339)}, "would replay 1 rows"}, // absolute stays absolute
	} {
		code, out := runCLI(t, append([]string{"replay", "--config", cfg, "--dry-run"}, c.args...)...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("replay %v: exit %d: %s, want %q", c.args, code, strings.TrimSpace(out), c.want)
		}
	}
	_ = context.Background
}
