package faults

// The harness of the fault scenarios: the built binary, a world of one
// test's own (schema, stream, subjects, HTTP receiver), and the collection
// of everything the receivers got for Check.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveQueuebox()
	os.Exit(code)
}

// queuebox builds the binary once per test run and returns its path.
func queuebox(t *testing.T) string {
	t.Helper()
	return testenv.BuildQueuebox(t)
}

// faultSuite skips t unless the fault suite was asked for.
func faultSuite(t *testing.T) {
	t.Helper()
	if os.Getenv("QUEUEBOX_FAULTS") != "1" {
		t.Skip("fault scenario: run with QUEUEBOX_FAULTS=1 (make test-faults)")
	}
}

func soak() bool { return os.Getenv("QUEUEBOX_SOAK") == "1" }

// startQueuebox runs the built binary with args as the process name for
// the rest of the test.
func startQueuebox(t *testing.T, name string, args ...string) *testenv.Process {
	t.Helper()
	return testenv.Start(t, queuebox(t), name, args...)
}

// action is what the HTTP receiver does with one request.
type action int

const (
	accept  action = iota // 200, recorded
	hang                  // sleep hangFor, then 200 and record (a slow receiver that processed it anyway)
	fail500               // 500 with a body
	fail429               // 429 with Retry-After
	hangup                // close the connection without an answer
	block                 // wait until release is closed, then 200 and record
)

// receiver is the HTTP endpoint of the hooks destination.
type receiver struct {
	t       *testing.T
	mu      sync.Mutex
	got     []Delivery
	srv     *http.Server
	ln      net.Listener
	addr    string
	hangFor time.Duration
	delay   time.Duration // before every accepted request
	// decide picks the action for a request; nil accepts everything.
	decide  atomic.Pointer[func(id string, attempt int) action]
	release chan struct{} // ends every block
	// requests by id, in arrival order, whatever the answer
	reqMu    sync.Mutex
	reqLog   map[string][]request
	requests atomic.Int64
	wg       sync.WaitGroup
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{t: t, hangFor: 2 * time.Second, release: make(chan struct{}), reqLog: map[string][]request{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.close)
	return r
}

func (r *receiver) URL() string { return "http://" + r.addr }

func (r *receiver) serve(ln net.Listener) {
	r.ln = ln
	r.srv = &http.Server{Handler: http.HandlerFunc(r.handle)}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.srv.Serve(ln)
	}()
}

// down closes the listener and every connection: connections are refused.
func (r *receiver) down() {
	_ = r.srv.Close()
	r.wg.Wait()
}

// up listens again on the same address.
func (r *receiver) up() {
	r.t.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("receiver: listen again on %s: %v", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.serve(ln)
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	r.wg.Wait()
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	var body struct {
		N int `json:"n"`
	}
	raw, _ := io.ReadAll(req.Body)
	_ = json.Unmarshal(raw, &body)
	id := req.Header.Get("X-Message-Id")
	attempt, _ := strconv.Atoi(req.Header.Get("X-Attempt"))
	act := accept
	if f := r.decide.Load(); f != nil {
		act = (*f)(id, attempt)
	}
	r.reqMu.Lock()
	r.reqLog[id] = append(r.reqLog[id], request{At: time.Now(), Attempt: attempt, Action: act})
	r.reqMu.Unlock()
	switch act {
	case fail500:
		http.Error(w, "boom: receiver failure", http.StatusInternalServerError)
		return
	case fail429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	case hangup:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				reset(c)
				return
			}
		}
		panic(http.ErrAbortHandler)
	case hang:
		time.Sleep(r.hangFor)
	case block:
		<-r.release
	}
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	r.got = append(r.got, Delivery{Dest: "hooks", ID: id, Key: req.Header.Get("X-Message-Key"), Topic: req.Header.Get("X-Topic"), N: body.N, At: time.Now()})
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// request is one request the receiver answered.
type request struct {
	At      time.Time
	Attempt int
	Action  action
}

func (r *receiver) requestsOf(id string) []request {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	return append([]request(nil), r.reqLog[id]...)
}

func (r *receiver) setDecide(f func(id string, attempt int) action) { r.decide.Store(&f) }

func (r *receiver) deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...)
}

// world is one scenario's schema, stream, subjects and receiver.
type world struct {
	t       *testing.T
	pg      *testenv.PG
	dbURL   string // what the relay connects to (may go through a proxy)
	natsURL string
	subject string
	stream  string
	hooks   *receiver
	wire    atomic.Int64 // publishes seen by a core NATS subscriber
}

type worldOptions struct {
	natsURL string // "" = the shared server
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	w := &world{t: t, pg: testenv.Postgres(t)}
	w.dbURL = w.pg.URL
	w.natsURL = o.natsURL
	if w.natsURL == "" {
		w.natsURL = testenv.NATSURL(t)
	}
	w.subject = testenv.UniqueName("qbf")
	_, s := testenv.NATSStream(t, w.natsURL, w.subject+".>")
	w.stream = s.CachedInfo().Config.Name
	w.hooks = newReceiver(t)
	w.watchWire()
	return w
}

// throughProxy points the relay's database URL at a TCP proxy in front of
// PostgreSQL, for the scenarios that cut its connections.
func (w *world) throughProxy() *Proxy {
	w.t.Helper()
	u, err := url.Parse(w.pg.URL)
	if err != nil {
		w.t.Fatal(err)
	}
	proxy, err := NewProxy(u.Host)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	w.dbURL = u.String()
	return proxy
}

// watchWire counts every message published on the world's subjects with a
// core subscription, duplicates included.
func (w *world) watchWire() {
	nc, err := nats.Connect(w.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		w.t.Fatalf("wire subscriber: %v", err)
	}
	w.t.Cleanup(nc.Close)
	sub, err := nc.Subscribe(w.subject+".>", func(*nats.Msg) { w.wire.Add(1) })
	if err != nil {
		w.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
}

// config writes a config file: order.* to JetStream (events), hook.* to
// HTTP (hooks). relay is the body of the relay section; extra is appended
// to the hooks destination.
func (w *world) config(relay, hooksExtra string) string {
	w.t.Helper()
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
%s
routes:
  - topicPattern: "order.*"
    destination: events
  - topicPattern: "hook.*"
    destination: hooks
`, w.dbURL, w.pg.Schema, indent(relay, "  "), w.natsURL, w.subject, w.hooks.URL(), indent(hooksExtra, "    "))
	path := filepath.Join(w.t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func indent(s, by string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		b.WriteString(by + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// insert writes n rows over keys keys; row i of a key carries {"n": i}
// and the topic topicOf(i).
func insert(t *testing.T, pool *pgxpool.Pool, n, keys int, topicOf func(n int) string) {
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	var next []int
	if v := keysNext.Load(); v != nil {
		next = *v
	}
	for len(next) < keys {
		next = append(next, 0)
	}
	if err := testenv.InsertKeyed(ctx, pool, n, next[:keys], topicOf); err != nil {
		t.Fatalf("insert: %v", err)
	}
	keysNext.Store(&next)
}

// keysNext continues the per-key numbering across insert calls of one
// test (tests run one at a time; reset by resetKeys).
var keysNext atomic.Pointer[[]int]

func resetKeys() { keysNext.Store(nil) }

func orderTopic(int) string { return "order.created" }

// countStates counts rows by state. A query error (the test's own pool
// meeting a restarted server) is retried for up to 30s.
func countStates(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := tryCountStates(pool)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("count states: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tryCountStates(pool *pgxpool.Pool) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM outbox GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	c := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		c[s] = n
	}
	return c, rows.Err()
}

// waitSettled waits until no row is pending or processing and returns
// when that happened. It polls with an index probe, not a count of the
// table, so that the polling takes little of the cores the relay runs on.
func waitSettled(t *testing.T, pool *pgxpool.Pool, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left bool
		err := pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM outbox WHERE state IN ('pending', 'processing'))`).Scan(&left)
		if err == nil && !left {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows not settled within %v: %v (%v)", within, countStates(t, pool), err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// destOf is the destination of a topic under world.config's routes.
func destOf(topic string) string {
	switch {
	case strings.HasPrefix(topic, "order."):
		return "events"
	case strings.HasPrefix(topic, "hook."):
		return "hooks"
	}
	return ""
}

// collect reads the table, the stream and the receiver for Check.
func (w *world) collect(leaseGrace time.Duration) Input {
	t := w.t
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	rows, err := w.pg.Pool.Query(ctx, `SELECT id::text, coalesce(key, ''), topic, sequence, coalesce((payload->>'n')::int, -1), state,
		coalesce(last_error, ''), coalesce(extract(epoch FROM now() - lease_expires_at), 0)
		FROM outbox ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	var in Input
	for rows.Next() {
		var r Row
		var ago float64
		if err := rows.Scan(&r.ID, &r.Key, &r.Topic, &r.Sequence, &r.N, &r.State, &r.LastError, &ago); err != nil {
			t.Fatal(err)
		}
		r.Dest = destOf(r.Topic)
		r.LeaseExpiredAgo = time.Duration(ago * float64(time.Second))
		in.Rows = append(in.Rows, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	in.Deliveries = append(w.streamMessages(), w.hooks.deliveries()...)
	in.Published = map[string]int{"events": int(w.wire.Load())}
	in.LeaseGrace = leaseGrace
	return in
}

// streamMessages reads the whole stream back in stream order on a fresh
// connection.
func (w *world) streamMessages() []Delivery {
	t := w.t
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	nc, err := nats.Connect(w.natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, w.stream)
	if err != nil {
		t.Fatalf("stream %s: %v", w.stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []Delivery
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(2000, jetstream.FetchMaxWait(2*time.Second))
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
			md, _ := m.Metadata()
			at := time.Time{}
			if md != nil {
				at = md.Timestamp
			}
			out = append(out, Delivery{Dest: "events", ID: h.Get("Nats-Msg-Id"), Key: h.Get("X-Message-Key"), Topic: h.Get("X-Topic"), N: body.N, At: at})
			n++
		}
		if n == 0 {
			break
		}
	}
	if uint64(len(out)) != info.State.Msgs {
		t.Fatalf("read %d of the stream's %d messages", len(out), info.State.Msgs)
	}
	return out
}

// figure is one scenario's measured numbers, logged as one line that
// docs/reliability.md quotes.
func figure(t *testing.T, scenario string, r Report, extra string) {
	t.Helper()
	t.Logf("FIGURES %s: %s %s", scenario, strings.SplitN(r.String(), "\n", 2)[0], extra)
	if f := os.Getenv("QUEUEBOX_FAULTS_REPORT"); f != "" {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(fh, "%s %s: %s %s\n", time.Now().Format(time.RFC3339), scenario, strings.SplitN(r.String(), "\n", 2)[0], extra)
			_ = fh.Close()
		}
	}
}

// mustCheck runs Check and fails t with the report when a promise broke.
func mustCheck(t *testing.T, in Input) Report {
	t.Helper()
	r := Check(in)
	if !r.OK() {
		t.Fatalf("checker: %v", r)
	}
	return r
}
