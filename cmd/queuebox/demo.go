package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/config"
)

// defaultDemoDatabaseURL is the database the demo uses when DATABASE_URL is
// not set.
const defaultDemoDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// demoSchema is where the demo creates its outbox table; it is dropped and
// created again on every run.
const demoSchema = "queuebox_demo"

// demoTopics cycle per key: order.* go to JetStream, shipment.* to the
// webhook. One key's events therefore cross two destinations and still
// arrive in order at each.
var demoTopics = []string{"order.created", "order.paid", "shipment.packed", "shipment.dispatched", "order.completed"}

type demoOptions struct {
	databaseURL string
	rows        int
	keys        int
	rate        int
	refuseEvery int
	timeout     time.Duration
}

func newDemoCmd(g *globalFlags) *cobra.Command {
	o := demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole pipeline on this machine: PostgreSQL -> queuebox -> embedded JetStream and a webhook, verified",
		Long: `demo needs only a reachable PostgreSQL (DATABASE_URL, default
` + defaultDemoDatabaseURL + `). It starts an embedded NATS JetStream server
and an in-process webhook receiver, creates the schema ` + demoSchema + ` with the
outbox table, writes order events across many keys (half before the relay
starts, the rest while it runs), relays them with the same engine as
'queuebox run', and verifies what arrived: every message once per id, none
lost, order per key held. The webhook refuses some first deliveries with 503
so that retries show. Exit status 1 when a check fails.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.rows <= 0 || o.keys <= 0 || o.rate <= 0 {
				return usagef("--rows, --keys and --rate must be positive")
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", defaultDemoDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	f.IntVar(&o.rows, "rows", 5000, "events to write")
	f.IntVar(&o.keys, "keys", 300, "distinct keys (orders)")
	f.IntVar(&o.rate, "rate", 1000, "rows per second written while the relay runs (the second half)")
	f.IntVar(&o.refuseEvery, "refuse-every", 20, "the webhook refuses every Nth first delivery with 503 (0: never)")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up after this long")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// demoEvent is one row the demo writes.
type demoEvent struct {
	Key   string `json:"order"`
	N     int    `json:"n"`
	Topic string `json:"event"`
}

// demoReceipt is one message as a receiver got it.
type demoReceipt struct {
	ID, Key string
	N       int
	Attempt string
}

func runDemo(ctx context.Context, out io.Writer, g *globalFlags, o demoOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// 1. An embedded JetStream server.
	storeDir, err := os.MkdirTemp("", "queuebox-demo-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(storeDir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("starting the embedded NATS server: %w", err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("the embedded NATS server did not start within 10s")
	}
	say("• embedded NATS JetStream at %s", ns.ClientURL())

	// 2. A webhook receiver.
	hook := &demoWebhook{refuseEvery: o.refuseEvery}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hsrv := &http.Server{Handler: hook, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hsrv.Serve(ln) }()
	defer hsrv.Close()
	say("• webhook receiver at http://%s/hooks/", ln.Addr())

	// 3. The configuration, in the same YAML format as 'queuebox run'.
	yml := fmt.Sprintf(`database:
  type: postgresql
  url: %q
  outboxTable: %s.outbox
relay:
  batchSize: 200
  pollInterval: 25ms
  lease: 30s
  backoff: {base: 200ms, max: 2s, jitter: 0.2}
server:
  listen: ""
destinations:
  orders:
    type: nats
    servers: [%q]
    subject: "demo.{{ topic }}"
    stream: DEMO
    createStream: true
    streamSubjects: ["demo.>"]
  webhooks:
    type: http
    url: "http://%s/hooks/{{ topic }}"
    timeout: 5s
routes:
  - topicPattern: "order.*"
    destination: orders
  - topicPattern: "shipment.*"
    destination: webhooks
`, o.databaseURL, demoSchema, ns.ClientURL(), ln.Addr())
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	say("• routes: order.* -> JetStream stream DEMO (subject demo.<topic>), shipment.* -> webhook")

	// 4. A fresh schema with the outbox table.
	pool, err := openPostgres(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w\n  the demo needs a PostgreSQL: set DATABASE_URL, or start one on 127.0.0.1:5432", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{demoSchema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("dropping the previous demo schema: %w", err)
	}
	if err := migrate(ctx, io.Discard, cfg, "up"); err != nil {
		return err
	}
	say("• migrated the outbox table into schema %s", demoSchema)

	// 5. The events: per key, a run of topics in order.
	events := demoEvents(o.rows, o.keys)
	half := len(events) / 2
	if err := insertEvents(ctx, pool, events[:half]); err != nil {
		return err
	}
	say("• wrote %d events across %d keys; starting the relay and writing %d more at %d rows/s", half, o.keys, len(events)-half, o.rate)

	// 6. The relay: the same runtime as 'queuebox run'.
	log, err := newLogger(os.Stderr, &globalFlags{logLevel: firstNonEmpty(g.logLevel, "error"), logFormat: g.logFormat}, cfg)
	if err != nil {
		return err
	}
	rt, err := newRuntime(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer rt.Close()
	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	start := time.Now()
	go func() { relayDone <- rt.engine.Run(runCtx) }()

	writeDone := make(chan error, 1)
	go func() { writeDone <- insertPaced(ctx, pool, events[half:], o.rate) }()

	// 7. Progress until everything written is sent (or dead).
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var writing = true
	var lastSent int64
	lastAt := start
	for {
		select {
		case <-ctx.Done():
			stopRelay()
			<-relayDone
			return fmt.Errorf("the demo did not finish within %v", o.timeout)
		case err := <-writeDone:
			if err != nil {
				stopRelay()
				<-relayDone
				return fmt.Errorf("writing events: %w", err)
			}
			writing = false
			writeDone = nil
			continue
		case <-tick.C:
		}
		c, err := demoCounts(ctx, pool)
		if err != nil {
			return err
		}
		now := time.Now()
		rate := float64(c["sent"]-lastSent) / now.Sub(lastAt).Seconds()
		lastSent, lastAt = c["sent"], now
		say("  %5.1fs  sent %6d/%d  pending %5d  processing %4d  dead %d  %7.0f rows/s",
			now.Sub(start).Seconds(), c["sent"], len(events), c["pending"], c["processing"], c["dead"], rate)
		if !writing && c["pending"] == 0 && c["processing"] == 0 {
			break
		}
	}
	elapsed := time.Since(start)
	stopRelay()
	<-relayDone

	// 8. Verify.
	say("")
	say("Verifying…")
	problems, err := verifyDemo(ctx, out, pool, ns.ClientURL(), hook, events, elapsed)
	if err != nil {
		return err
	}
	if problems > 0 {
		return fmt.Errorf("demo: %d check(s) failed", problems)
	}
	say("")
	say("All checks passed. Try it yourself: psql %s -c 'SELECT state, count(*) FROM %s.outbox GROUP BY 1'", redactURL(o.databaseURL), demoSchema)
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func redactURL(u string) string {
	if i := strings.Index(u, "?"); i >= 0 {
		u = u[:i]
	}
	return u
}

// demoEvents returns n events over keys keys, each key's events numbered
// 0, 1, 2... in the order they will be written.
func demoEvents(n, keys int) []demoEvent {
	rng := rand.New(rand.NewPCG(1, 2))
	next := make([]int, keys)
	events := make([]demoEvent, n)
	for i := range events {
		k := rng.IntN(keys)
		events[i] = demoEvent{Key: fmt.Sprintf("order-%04d", k), N: next[k], Topic: demoTopics[next[k]%len(demoTopics)]}
		next[k]++
	}
	return events
}

// insertEvents writes events in transactions of 100 rows, one statement
// each, in order.
func insertEvents(ctx context.Context, pool *pgxpool.Pool, events []demoEvent) error {
	for len(events) > 0 {
		n := min(100, len(events))
		if err := insertTx(ctx, pool, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

func insertTx(ctx context.Context, pool *pgxpool.Pool, events []demoEvent) error {
	topics := make([]string, len(events))
	keys := make([]string, len(events))
	payloads := make([]string, len(events))
	for i, e := range events {
		b, _ := json.Marshal(e)
		topics[i], keys[i], payloads[i] = e.Topic, e.Key, string(b)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+demoSchema+`.outbox (topic, key, payload)
		SELECT t, k, p::jsonb FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(t, k, p, o) ORDER BY o`,
		topics, keys, payloads)
	if err != nil {
		return fmt.Errorf("inserting demo events: %w", err)
	}
	return nil
}

// insertPaced writes events at about rate rows per second, in small
// transactions like an application would.
func insertPaced(ctx context.Context, pool *pgxpool.Pool, events []demoEvent, rate int) error {
	const per = 10
	interval := time.Duration(float64(time.Second) * per / float64(rate))
	t := time.NewTicker(interval)
	defer t.Stop()
	for len(events) > 0 {
		n := min(per, len(events))
		if err := insertTx(ctx, pool, events[:n]); err != nil {
			return err
		}
		events = events[n:]
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func demoCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM `+demoSchema+`.outbox GROUP BY state`)
	if err != nil {
		return nil, err
	}
	c := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		c[s] = n
	}
	return c, rows.Err()
}

// demoWebhook records what it accepts and refuses the first delivery of
// some messages with 503.
type demoWebhook struct {
	refuseEvery int

	mu       sync.Mutex
	accepted []demoReceipt
	refused  int
	firsts   int
}

func (h *demoWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var e demoEvent
	if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	rec := demoReceipt{ID: r.Header.Get("X-Message-Id"), Key: r.Header.Get("X-Message-Key"), N: e.N, Attempt: r.Header.Get("X-Attempt")}
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec.Attempt == "0" {
		h.firsts++
	}
	if h.refuseEvery > 0 && rec.Attempt == "0" && h.firsts%h.refuseEvery == 0 {
		h.refused++
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	h.accepted = append(h.accepted, rec)
	w.WriteHeader(http.StatusNoContent)
}

// verifyDemo checks the table and both receivers, prints the summary and
// returns the number of failed checks.
func verifyDemo(ctx context.Context, out io.Writer, pool *pgxpool.Pool, natsURL string, hook *demoWebhook, events []demoEvent, elapsed time.Duration) (int, error) {
	problems := 0
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			problems++
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}

	// The table: every row sent.
	c, err := demoCounts(ctx, pool)
	if err != nil {
		return 0, err
	}
	check(c["sent"] == int64(len(events)), "table: %d of %d rows sent (pending %d, processing %d, dead %d)",
		c["sent"], len(events), c["pending"], c["processing"], c["dead"])

	type row struct{ topic, key string }
	want := map[string]row{}
	rows, err := pool.Query(ctx, `SELECT id::text, topic, key FROM `+demoSchema+`.outbox`)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.topic, &r.key); err != nil {
			return 0, err
		}
		want[id] = r
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	wantNATS, wantHook := 0, 0
	for _, r := range want {
		if strings.HasPrefix(r.topic, "order.") {
			wantNATS++
		} else {
			wantHook++
		}
	}

	// JetStream: read the whole stream back.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	stream, err := js.Stream(ctx, "DEMO")
	if err != nil {
		return 0, fmt.Errorf("reading the DEMO stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	var natsGot []demoReceipt
	for len(natsGot) < int(info.State.Msgs) {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, err
		}
		n := 0
		for m := range batch.Messages() {
			var e demoEvent
			_ = json.Unmarshal(m.Data(), &e)
			natsGot = append(natsGot, demoReceipt{ID: m.Headers().Get("Nats-Msg-Id"), Key: m.Headers().Get("X-Message-Key"), N: e.N})
			n++
		}
		if n == 0 {
			break
		}
	}
	natsIDs := map[string]int{}
	idMismatch := 0
	for _, r := range natsGot {
		natsIDs[r.ID]++
		if w, ok := want[r.ID]; !ok || w.key != r.Key || !strings.HasPrefix(w.topic, "order.") {
			idMismatch++
		}
	}
	check(len(natsGot) == wantNATS && len(natsIDs) == wantNATS && idMismatch == 0,
		"JetStream: %d messages for %d order.* rows, %d distinct Nats-Msg-Id, each the id of its row", len(natsGot), wantNATS, len(natsIDs))
	natsKeys, natsBad := inOrder(natsGot)
	check(natsBad == 0, "JetStream: order per key held for %d keys (%d out of order)", natsKeys, natsBad)

	hook.mu.Lock()
	accepted := append([]demoReceipt(nil), hook.accepted...)
	refused := hook.refused
	hook.mu.Unlock()
	hookIDs := map[string]int{}
	hookMismatch := 0
	for _, r := range accepted {
		hookIDs[r.ID]++
		if w, ok := want[r.ID]; !ok || w.key != r.Key || !strings.HasPrefix(w.topic, "shipment.") {
			hookMismatch++
		}
	}
	check(len(hookIDs) == wantHook && hookMismatch == 0,
		"webhook: %d of %d shipment.* rows accepted (%d deliveries, %d first deliveries refused with 503 and retried)",
		len(hookIDs), wantHook, len(accepted), refused)
	hookKeys, hookBad := inOrder(accepted)
	check(hookBad == 0, "webhook: order per key held for %d keys (%d out of order)", hookKeys, hookBad)

	fmt.Fprintf(out, "\n  %d events over %d keys relayed in %.1fs (%.0f rows/s overall, writes paced)\n",
		len(events), len(natsKeys0(natsGot, accepted)), elapsed.Seconds(), float64(len(events))/elapsed.Seconds())
	return problems, nil
}

// inOrder counts the keys in receipts and the receipts whose number is not
// above the previous one of the same key.
func inOrder(rs []demoReceipt) (keys, bad int) {
	last := map[string]int{}
	for _, r := range rs {
		if p, ok := last[r.Key]; ok && r.N <= p {
			bad++
		}
		last[r.Key] = r.N
	}
	return len(last), bad
}

func natsKeys0(a, b []demoReceipt) map[string]bool {
	keys := map[string]bool{}
	for _, r := range a {
		keys[r.Key] = true
	}
	for _, r := range b {
		keys[r.Key] = true
	}
	return keys
}
