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
	keep        bool
	output      outputFormat
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
so that retries show. It drops the schema at the end, unless --keep.

Progress goes to stderr, the verification to stdout (-o json: {"ok",
"checks": [{"ok", "check"}], "rows", "keys", "seconds", "schema",
"schemaKept"}). Exit status 1 when a check fails.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.rows <= 0 || o.keys <= 0 || o.rate <= 0 {
				return usagef("--rows, --keys and --rate must be positive")
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", defaultDemoDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	f.IntVar(&o.rows, "rows", 5000, "events to write")
	f.IntVar(&o.keys, "keys", 300, "distinct keys (orders)")
	f.IntVar(&o.rate, "rate", 1000, "rows per second written while the relay runs (the second half)")
	f.IntVar(&o.refuseEvery, "refuse-every", 20, "the webhook refuses every Nth first delivery with 503 (0: never)")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up after this long")
	f.BoolVar(&o.keep, "keep", false, "keep the schema "+demoSchema+" and its rows at the end, to look at them")
	addOutputFlag(cmd, &o.output)
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

// demoEnv is what the demo runs against: an embedded JetStream server and
// a webhook receiver.
type demoEnv struct {
	ns   *server.Server
	hook *demoWebhook
	addr string // the webhook's host:port
	stop []func()
}

func (e *demoEnv) close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}

// startDemoEnv starts the embedded NATS JetStream server and the webhook
// receiver; close stops them.
func startDemoEnv(ctx context.Context, o demoOptions, say func(string, ...any)) (*demoEnv, error) {
	env := &demoEnv{hook: &demoWebhook{refuseEvery: o.refuseEvery}}
	storeDir, err := os.MkdirTemp("", "queuebox-demo-nats-")
	if err != nil {
		return nil, err
	}
	env.stop = append(env.stop, func() { _ = os.RemoveAll(storeDir) })
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true})
	if err != nil {
		env.close()
		return nil, fmt.Errorf("starting the embedded NATS server: %w", err)
	}
	go ns.Start()
	env.ns = ns
	env.stop = append(env.stop, ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		env.close()
		return nil, errors.New("the embedded NATS server did not start within 10s")
	}
	say("• embedded NATS JetStream at %s", ns.ClientURL())
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		env.close()
		return nil, err
	}
	hsrv := &http.Server{Handler: env.hook, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hsrv.Serve(ln) }()
	env.addr = ln.Addr().String()
	env.stop = append(env.stop, func() { _ = hsrv.Close() })
	say("• webhook receiver at http://%s/hooks/", env.addr)
	return env, nil
}

// demoConfig is the demo's configuration, in the same YAML format as
// 'queuebox run'.
func demoConfig(o demoOptions, env *demoEnv) (*config.Config, error) {
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
`, o.databaseURL, demoSchema, env.ns.ClientURL(), env.addr)
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	return cfg, nil
}

func runDemo(ctx context.Context, out, progress io.Writer, g *globalFlags, o demoOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	env, err := startDemoEnv(ctx, o, say)
	if err != nil {
		return err
	}
	defer env.close()
	cfg, err := demoConfig(o, env)
	if err != nil {
		return err
	}
	say("• routes: order.* -> JetStream stream DEMO (subject demo.<topic>), shipment.* -> webhook")
	pool, err := freshDemoSchema(ctx, cfg, say)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !o.keep {
		defer dropDemoSchema(ctx, pool, say)
	}
	events := demoEvents(o.rows, o.keys)
	elapsed, err := relayDemo(ctx, g, o, cfg, pool, events, say)
	if err != nil {
		return err
	}
	say("• verifying")
	rep, err := verifyDemo(ctx, pool, env, events, elapsed)
	if err != nil {
		return err
	}
	rep.Schema, rep.SchemaKept = demoSchema, o.keep
	if o.output.json() {
		err = printJSON(out, rep)
	} else {
		err = rep.print(out, o.databaseURL)
	}
	if err == nil && !rep.OK {
		err = fmt.Errorf("demo: %d check(s) failed", rep.failed())
	}
	return err
}

// freshDemoSchema drops what an earlier demo left and migrates the outbox
// table into the demo's schema.
func freshDemoSchema(ctx context.Context, cfg *config.Config, say func(string, ...any)) (*pgxpool.Pool, error) {
	pool, err := openPostgres(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w\n  the demo needs a PostgreSQL: set DATABASE_URL, or start one on 127.0.0.1:5432", err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{demoSchema}.Sanitize()+" CASCADE"); err != nil {
		pool.Close()
		return nil, fmt.Errorf("dropping the previous demo schema: %w", err)
	}
	if _, err := migrate(ctx, cfg, "up", nil); err != nil {
		pool.Close()
		return nil, err
	}
	say("• migrated the outbox table into schema %s", demoSchema)
	return pool, nil
}

// dropDemoSchema drops the demo's schema, also after a failure or an
// interrupt (within a few seconds of its own).
func dropDemoSchema(ctx context.Context, pool *pgxpool.Pool, say func(string, ...any)) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{demoSchema}.Sanitize()+" CASCADE"); err != nil {
		say("• could not drop schema %s: %v (drop it with: DROP SCHEMA %s CASCADE)", demoSchema, err, demoSchema)
		return
	}
	say("• dropped schema %s (--keep keeps it)", demoSchema)
}

// relayDemo writes half the events, starts the relay (the same runtime as
// 'queuebox run'), writes the rest at o.rate and waits until every row is
// sent or dead. It returns how long the relay took.
func relayDemo(ctx context.Context, g *globalFlags, o demoOptions, cfg *config.Config, pool *pgxpool.Pool, events []demoEvent, say func(string, ...any)) (time.Duration, error) {
	half := len(events) / 2
	if err := insertEvents(ctx, pool, events[:half]); err != nil {
		return 0, err
	}
	say("• wrote %d events across %d keys; starting the relay and writing %d more at %d rows/s", half, o.keys, len(events)-half, o.rate)
	log, err := newLogger(os.Stderr, &globalFlags{logLevel: firstNonEmpty(g.logLevel, "error"), logFormat: g.logFormat}, cfg)
	if err != nil {
		return 0, err
	}
	rt, err := newRuntime(ctx, cfg, log)
	if err != nil {
		return 0, err
	}
	defer rt.Close()
	runCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	start := time.Now()
	go func() { relayDone <- rt.engine.Run(runCtx) }()
	writeDone := make(chan error, 1)
	go func() { writeDone <- insertPaced(ctx, pool, events[half:], o.rate) }()
	err = waitDemoDrained(ctx, pool, len(events), start, writeDone, say)
	elapsed := time.Since(start)
	stopRelay()
	if rerr := <-relayDone; err == nil && rerr != nil {
		err = fmt.Errorf("the relay: %w", rerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return 0, fmt.Errorf("the demo did not finish within %v", o.timeout)
	}
	return elapsed, err
}

// waitDemoDrained prints the table's counts every half second until the
// writer is done and nothing is pending or processing.
func waitDemoDrained(ctx context.Context, pool *pgxpool.Pool, total int, start time.Time, writeDone chan error, say func(string, ...any)) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	writing := true
	var lastSent int64
	lastAt := start
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-writeDone:
			if err != nil {
				return fmt.Errorf("writing events: %w", err)
			}
			writing, writeDone = false, nil
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
			now.Sub(start).Seconds(), c["sent"], total, c["pending"], c["processing"], c["dead"], rate)
		if !writing && c["pending"] == 0 && c["processing"] == 0 {
			return nil
		}
	}
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

// demoReport is the demo's verification: what `demo` prints on stdout
// (-o json: this document).
type demoReport struct {
	OK         bool        `json:"ok"`
	Checks     []demoCheck `json:"checks"`
	Rows       int         `json:"rows"`
	Keys       int         `json:"keys"`
	Seconds    float64     `json:"seconds"` // from the relay's start until every row was sent
	Schema     string      `json:"schema"`
	SchemaKept bool        `json:"schemaKept"`
}

type demoCheck struct {
	OK    bool   `json:"ok"`
	Check string `json:"check"`
}

func (r *demoReport) check(ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, demoCheck{OK: ok, Check: fmt.Sprintf(format, args...)})
}

func (r *demoReport) failed() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

func (r *demoReport) print(w io.Writer, databaseURL string) error {
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s\n", mark, c.Check)
	}
	fmt.Fprintf(w, "\n  %d events over %d keys relayed in %.1fs (%.0f rows/s overall, writes paced)\n",
		r.Rows, r.Keys, r.Seconds, float64(r.Rows)/r.Seconds)
	if !r.OK {
		return nil
	}
	if r.SchemaKept {
		_, err := fmt.Fprintf(w, "\nAll checks passed. Try it yourself: psql %s -c 'SELECT state, count(*) FROM %s.outbox GROUP BY 1'\n", redactURL(databaseURL), r.Schema)
		return err
	}
	_, err := fmt.Fprintf(w, "\nAll checks passed. The schema %s is dropped; run with --keep to look at its rows.\n", r.Schema)
	return err
}

// demoRow is a row of the demo's table, by id.
type demoRow struct{ topic, key string }

// verifyDemo checks the table and both receivers.
func verifyDemo(ctx context.Context, pool *pgxpool.Pool, env *demoEnv, events []demoEvent, elapsed time.Duration) (*demoReport, error) {
	rep := &demoReport{Rows: len(events), Seconds: elapsed.Seconds()}
	c, err := demoCounts(ctx, pool)
	if err != nil {
		return nil, err
	}
	rep.check(c["sent"] == int64(len(events)), "table: %d of %d rows sent (pending %d, processing %d, dead %d)",
		c["sent"], len(events), c["pending"], c["processing"], c["dead"])
	want, err := demoRows(ctx, pool)
	if err != nil {
		return nil, err
	}
	natsGot, err := readDemoStream(ctx, env.ns.ClientURL())
	if err != nil {
		return nil, err
	}
	checkDemoReceipts(rep, "JetStream", "order.", natsGot, want, "")
	env.hook.mu.Lock()
	accepted := append([]demoReceipt(nil), env.hook.accepted...)
	refused := env.hook.refused
	env.hook.mu.Unlock()
	checkDemoReceipts(rep, "webhook", "shipment.", accepted, want,
		fmt.Sprintf(" (%d deliveries, %d first deliveries refused with 503 and retried)", len(accepted), refused))
	rep.Keys = len(natsKeys0(natsGot, accepted))
	rep.OK = rep.failed() == 0
	return rep, nil
}

// demoRows reads the demo table's rows by id.
func demoRows(ctx context.Context, pool *pgxpool.Pool) (map[string]demoRow, error) {
	want := map[string]demoRow{}
	rows, err := pool.Query(ctx, `SELECT id::text, topic, key FROM `+demoSchema+`.outbox`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var r demoRow
		if err := rows.Scan(&id, &r.topic, &r.key); err != nil {
			return nil, err
		}
		want[id] = r
	}
	return want, rows.Err()
}

// checkDemoReceipts checks what one receiver got against the rows whose
// topic starts with prefix: each once, with its row's id and key, in order
// per key. retries, when not "", describes the retries the receiver saw
// (the webhook): its deliveries then count each id once.
func checkDemoReceipts(rep *demoReport, who, prefix string, got []demoReceipt, want map[string]demoRow, retries string) {
	wanted := 0
	for _, r := range want {
		if strings.HasPrefix(r.topic, prefix) {
			wanted++
		}
	}
	ids := map[string]int{}
	mismatch := 0
	for _, r := range got {
		ids[r.ID]++
		if w, ok := want[r.ID]; !ok || w.key != r.Key || !strings.HasPrefix(w.topic, prefix) {
			mismatch++
		}
	}
	if retries != "" {
		rep.check(len(ids) == wanted && mismatch == 0, "%s: %d of %d %s* rows accepted%s", who, len(ids), wanted, prefix, retries)
	} else {
		rep.check(len(got) == wanted && len(ids) == wanted && mismatch == 0,
			"%s: %d messages for %d %s* rows, %d distinct Nats-Msg-Id, each the id of its row", who, len(got), wanted, prefix, len(ids))
	}
	keys, bad := inOrder(got)
	rep.check(bad == 0, "%s: order per key held for %d keys (%d out of order)", who, keys, bad)
}

// readDemoStream reads the whole DEMO stream back.
func readDemoStream(ctx context.Context, natsURL string) ([]demoReceipt, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, "DEMO")
	if err != nil {
		return nil, fmt.Errorf("reading the DEMO stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var got []demoReceipt
	for len(got) < int(info.State.Msgs) {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			var e demoEvent
			_ = json.Unmarshal(m.Data(), &e)
			got = append(got, demoReceipt{ID: m.Headers().Get("Nats-Msg-Id"), Key: m.Headers().Get("X-Message-Key"), N: e.N})
			n++
		}
		if n == 0 {
			break
		}
	}
	return got, nil
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
