package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/migrations"
)

// world is what every case shares: the bench database, the NATS server and
// the HTTP receiver.
type world struct {
	dbURL  string // the bench database
	dbName string
	admin  *pgxpool.Pool // on the server's maintenance database: pg_stat_database reads

	ns      *server.Server // nil with an external NATS server
	nsDir   string         // the embedded server's store; its StoreDir is a subdirectory
	natsURL string
	nc      *nats.Conn
	js      jetstream.JetStream

	amqp    *amqpWorld // nil when RabbitMQ did not answer (amqpErr says why)
	amqpErr error
	kafka   *kafkaWorld // nil without Options.KafkaBrokers

	hook    *receiver
	hookSrv *http.Server
	hookURL string // http://127.0.0.1:port

	spans *spanSink // Options.Trace; nil otherwise
}

// traceURL is the endpoint traced replicas export to; "" when the bench
// does not trace.
func (w *world) traceURL() string {
	if w.spans == nil {
		return ""
	}
	return w.spans.url
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns rawURL pointing at database name.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("bench: database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// withSearchPath returns rawURL whose connections use schema as search_path,
// keeping the options the URL already has (say -c log_min_duration_statement=0
// to see every statement of a run in the server log).
func withSearchPath(rawURL, schema string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set("options", strings.TrimSpace(q.Get("options")+" -c search_path="+schema))
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func openWorld(ctx context.Context, o *Options) (_ *world, err error) {
	w := &world{dbName: o.Database}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	// The bench runs in a database of its own so that its transaction
	// counters (idle cost) are not mixed with other users of the server.
	w.admin, err = pgxpool.New(ctx, o.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: connect %s: %w", redactURL(o.DatabaseURL), err)
	}
	if err := w.admin.Ping(ctx); err != nil {
		return nil, fmt.Errorf("bench: connect %s: %w", redactURL(o.DatabaseURL), err)
	}
	if _, err := w.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{o.Database}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "42P04" && pgErr.Code != "23505") { // duplicate_database; a concurrent create
			return nil, fmt.Errorf("bench: create database %s: %w", o.Database, err)
		}
	}
	if w.dbURL, err = withDatabase(o.DatabaseURL, o.Database); err != nil {
		return nil, err
	}

	w.natsURL = o.NATSURL
	if w.natsURL == "" {
		if w.nsDir, err = os.MkdirTemp("", "queuebox-bench-nats-"); err != nil {
			return nil, err
		}
		w.ns, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: w.nsDir, NoLog: true, NoSigs: true})
		if err != nil {
			return nil, fmt.Errorf("bench: embedded NATS: %w", err)
		}
		go w.ns.Start()
		if !w.ns.ReadyForConnections(10 * time.Second) {
			return nil, errors.New("bench: embedded NATS did not start within 10s")
		}
		w.natsURL = w.ns.ClientURL()
	}
	w.nc, err = nats.Connect(w.natsURL, nats.Name("queuebox-bench"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect NATS %s: %w", w.natsURL, err)
	}
	if w.js, err = jetstream.New(w.nc); err != nil {
		return nil, err
	}

	if o.want("amqp-keyed") || o.want("amqp-unkeyed") {
		w.amqp, w.amqpErr = dialAMQP(o.AMQPURL)
	}
	if o.KafkaBrokers != "" {
		w.kafka = newKafkaWorld(o.KafkaBrokers)
	}

	w.hook = &receiver{}
	if w.hookSrv, w.hookURL, err = serveLoopback(ctx, w.hook); err != nil {
		return nil, err
	}
	if o.Trace {
		if w.spans, err = openSpanSink(ctx); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// serveLoopback serves h over HTTP on a free loopback port until the
// returned server is closed; base is http://127.0.0.1:port.
func serveLoopback(ctx context.Context, h http.Handler) (srv *http.Server, base string, err error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

func (w *world) close() {
	if w.spans != nil {
		w.spans.close()
	}
	if w.hookSrv != nil {
		_ = w.hookSrv.Close()
	}
	if w.nc != nil {
		w.nc.Close()
	}
	w.amqp.close()
	if w.ns != nil {
		w.ns.Shutdown()
		w.ns.WaitForShutdown()
	}
	if w.nsDir != "" {
		// The whole directory: the server's StoreDir is its jetstream/
		// subdirectory, and removing only that left one empty directory
		// in the temp dir per run.
		_ = os.RemoveAll(w.nsDir)
	}
	if w.admin != nil {
		w.admin.Close()
	}
}

// transactions returns the transactions of the bench database so far,
// committed and rolled back (pg_stat_database, flushed by backends at most
// ~1s late). Rolled back ones count: a lock-mode claim that finds nothing
// ends its transaction with a rollback, and it cost a query all the same.
func (w *world) transactions(ctx context.Context) (int64, error) {
	var n int64
	err := w.admin.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", w.dbName).Scan(&n)
	return n, err
}

// schema is one case's outbox table: a fresh schema, migrated, dropped at
// close.
type schema struct {
	name string
	url  string // the bench database with search_path = name
	pool *pgxpool.Pool
	w    *world
}

func (w *world) newSchema(ctx context.Context) (*schema, error) {
	name := "qbb_" + randomHex(6)
	s := &schema{name: name, url: withSearchPath(w.dbURL, name), w: w}
	cfg, err := pgxpool.ParseConfig(w.dbURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.ConnConfig.RuntimeParams["application_name"] = "queuebox-bench"
	cfg.MaxConns = 32
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("bench: create schema: %w", err)
	}
	db := stdlib.OpenDB(*cfg.ConnConfig.Copy())
	p, err := migrations.NewProvider("postgresql", db)
	if err == nil {
		_, err = p.Up(ctx)
	}
	db.Close()
	if err != nil {
		s.close()
		return nil, fmt.Errorf("bench: migrate: %w", err)
	}
	return s, nil
}

func (s *schema) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
	s.pool.Close()
}

// payload returns a JSON object of exactly size bytes (at least 16).
func payload(size int) string {
	const head, tail = `{"pad":"`, `"}`
	n := max(size-len(head)-len(tail), 0)
	return head + strings.Repeat("x", n) + tail
}

// insert writes n pending rows of topic with COPY: keys distinct keys
// round-robin ('k<i % keys>'), or no key when keys is 0; then ANALYZE.
func (s *schema) insert(ctx context.Context, topic string, n, keys, size int) error {
	body := payload(size)
	rows := make([][]any, 0, n)
	for i := 0; i < n; i++ {
		var key any
		if keys > 0 {
			key = fmt.Sprintf("k%d", i%keys)
		}
		rows = append(rows, []any{topic, key, body})
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"outbox"}, []string{"topic", "key", "payload"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("bench: insert rows: %w", err)
	}
	_, err := s.pool.Exec(ctx, "VACUUM ANALYZE outbox")
	return err
}

// pendingCount returns the rows not yet sent (pending or processing).
func (s *schema) unfinished(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE state IN ('pending','processing')").Scan(&n)
	return n, err
}

// claims returns how many claims delivered the sent rows: every claim
// leaves its own token on the rows it took (complete.sql keeps it).
func (s *schema) claims(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(DISTINCT claim_token) FROM outbox WHERE state = 'sent'").Scan(&n)
	return n, err
}

// stream creates a JetStream stream of its own for one run.
func (w *world) stream(ctx context.Context, subject string) (jetstream.Stream, error) {
	name := "QBB_" + strings.ToUpper(randomHex(6))
	return w.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
}

// waitStream waits until the stream holds n messages (JetStream has
// deduplicated them on Nats-Msg-Id) and returns when that was seen.
func waitStream(ctx context.Context, st jetstream.Stream, n int) (time.Time, error) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		info, err := st.Info(ctx)
		if err == nil && info.State.Msgs >= uint64(n) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			got := uint64(0)
			if info != nil {
				got = info.State.Msgs
			}
			return time.Time{}, fmt.Errorf("stream has %d of %d messages: %w", got, n, ctx.Err())
		case <-t.C:
		}
	}
}

// receiver is the in-process HTTP endpoint. It counts distinct message ids
// (X-Message-Id) of the current run and records when each arrived.
type receiver struct {
	mu  sync.Mutex
	run *receipts
}

// receipts is one run's view of the receiver (HTTP) or of a NATS
// subscription.
type receipts struct {
	mu     sync.Mutex
	want   int
	seen   map[string]time.Time
	done   chan struct{}
	doneAt time.Time
	dupes  int
}

func newReceipts(want int) *receipts {
	return &receipts{want: want, seen: make(map[string]time.Time, want), done: make(chan struct{})}
}

func (r *receipts) add(id string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[id]; ok {
		r.dupes++
		return
	}
	r.seen[id] = at
	if len(r.seen) == r.want {
		r.finish(at)
	}
}

// expect lowers the number of receipts awaited to n (writers that fell
// behind wrote fewer rows than planned), closing done if they are in.
func (r *receipts) expect(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = n
	if len(r.seen) >= n {
		var last time.Time // the latest arrival
		for _, at := range r.seen {
			if at.After(last) {
				last = at
			}
		}
		r.finish(last)
	}
}

// finish closes done once; r.mu is held.
func (r *receipts) finish(at time.Time) {
	select {
	case <-r.done:
	default:
		r.doneAt = at
		close(r.done)
	}
}

// unavailable says why the cases of dest cannot run, or nil.
func (w *world) unavailable(dest string) error {
	switch {
	case dest == "amqp" && w.amqp == nil:
		return fmt.Errorf("%w (start RabbitMQ, or set --amqp-url)", w.amqpErr)
	case dest == "kafka" && w.kafka == nil:
		return errors.New("no Kafka brokers (set --kafka-brokers)")
	}
	return nil
}

// wait returns when every wanted id arrived (the time the last one did), or
// fails naming the receiver and how many arrived when ctx ends.
func (r *receipts) wait(ctx context.Context, receiver string) (time.Time, error) {
	select {
	case <-r.done:
		return r.doneAt, nil
	case <-ctx.Done():
		r.mu.Lock()
		want := r.want
		r.mu.Unlock()
		return time.Time{}, fmt.Errorf("%s has %d of %d rows: %w", receiver, r.count(), want, ctx.Err())
	}
}

func (r *receipts) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (h *receiver) set(r *receipts) {
	h.mu.Lock()
	h.run = r
	h.mu.Unlock()
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	now := time.Now()
	h.mu.Lock()
	r := h.run
	h.mu.Unlock()
	if r != nil {
		if id := req.Header.Get("X-Message-Id"); id != "" {
			r.add(id, now)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
