package main

// The receiving service (inbox:, docs/inbox.md): the HTTP ingest port and
// the broker sources, storing into the inbox table on a connection pool of
// their own, with synchronous commits: a 202 or an acknowledgement means
// the row is on disk.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/ingest"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
	"github.com/queuebox/queuebox/inbox/source/amqpsource"
	"github.com/queuebox/queuebox/inbox/source/kafkasource"
	"github.com/queuebox/queuebox/inbox/source/natssource"
	"github.com/queuebox/queuebox/metrics"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/relay"
)

// inboxService is a running receiving service.
type inboxService struct {
	cfg     *config.Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	table   *inbox.Table
	metrics *metrics.Inbox
	wg      sync.WaitGroup
	cancel  context.CancelFunc
}

// startInbox starts the receiving service when cfg has an inbox; the
// returned stop ends it (the ingest server drains its requests) and waits.
// With no inbox configured, stop does nothing.
func startInbox(ctx context.Context, cfg *config.Config, log *slog.Logger, m *metrics.Metrics) (stop func(), err error) {
	if !cfg.Inbox.Enabled() {
		return func() {}, nil
	}
	s := &inboxService{cfg: cfg, log: log}
	names := make([]string, 0, len(cfg.Inbox.Sources))
	for n := range cfg.Inbox.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	s.metrics = m.NewInbox(names)
	if err := s.openTable(ctx); err != nil {
		return nil, err
	}
	// One statement in flight per core: more flushers make smaller batches,
	// each with its own commit, on the database the requests wait for.
	s.table.Batch(min(runtime.NumCPU(), max(cfg.Inbox.MaxConns/2, 1)))
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	stopAll := func() { cancel(); s.wg.Wait(); s.table.Close(); s.pool.Close() }
	if err := s.startSources(rctx, names); err != nil {
		stopAll()
		return nil, err
	}
	if err := s.startIngest(rctx, names); err != nil {
		stopAll()
		return nil, err
	}
	s.startTableUpkeep(rctx)
	return stopAll, nil
}

// openTable connects and checks that the table and its statements fit.
func (s *inboxService) openTable(ctx context.Context) error {
	in := s.cfg.Inbox
	pc, err := pgxpool.ParseConfig(s.cfg.Database.URL)
	if err != nil {
		return errors.New("database.url is not a valid PostgreSQL connection string; write it as postgres://user@host:5432/dbname")
	}
	pc.MaxConns = int32(in.MaxConns)
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > connectTimeout {
		pc.ConnConfig.ConnectTimeout = connectTimeout
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "queuebox inbox"
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err == nil {
		err = s.pool.Ping(ctx)
	}
	if err != nil {
		if s.pool != nil {
			s.pool.Close()
		}
		return describeDBError(pc, err, s.cfg.Database.URL)
	}
	outbox, err := dialect.NewMapping(s.cfg.Database.OutboxTable, s.cfg.Database.Columns, s.cfg.Database.States)
	if err == nil {
		s.table, err = inbox.NewTable(s.pool, inbox.TableOptions{Table: in.Table, Columns: in.Columns, Outbox: outbox})
	}
	if err == nil {
		err = s.checkStatements(ctx)
	}
	if err != nil {
		s.pool.Close()
		return err
	}
	return nil
}

// checkStatements prepares the receive statements, so that a missing
// table or a column of the wrong type fails the start, not a request.
func (s *inboxService) checkStatements(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, q := range s.table.Statements() {
		if _, err := conn.Conn().Prepare(ctx, "", q); err != nil {
			return fmt.Errorf("inbox.table %s: %v (run 'queuebox migrate' with the inbox configured to create it)", s.cfg.Inbox.Table, err)
		}
	}
	return nil
}

// checkInbox reports, for queuebox check, whether the inbox table takes
// the receive statements as run prepares them (it writes nothing).
func checkInbox(ctx context.Context, rep *checkReport, cfg *config.Config) {
	if !cfg.Inbox.Enabled() {
		return
	}
	s := &inboxService{cfg: cfg}
	if err := s.openTable(ctx); err != nil {
		rep.fail("", "%v", err)
		return
	}
	s.pool.Close()
	rep.pass("inbox table %s: %d sources", cfg.Inbox.Table, len(cfg.Inbox.Sources))
}

// rules compiles a source's intake rules from its config.
func rules(name string, sc config.InboxSource, dropHeaders ...string) (intake.Rules, error) {
	r := intake.Rules{Source: name, Headers: intake.NewHeaderPolicy(dropHeaders...)}
	var err error
	if r.Topic, err = intake.ParseTopic(sc.Topic); err != nil {
		return r, err
	}
	if f := sc.IdempotencyKey; f != nil {
		if r.IdempotencyKey, err = intake.NewField(f.Header, f.JSONPath); err != nil {
			return r, err
		}
	}
	if f := sc.OrderKey; f != nil {
		if r.OrderKey, err = intake.NewField(f.Header, f.JSONPath); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (s *inboxService) startIngest(ctx context.Context, names []string) error {
	var sources []ingest.Source
	for _, name := range names {
		sc := s.cfg.Inbox.Sources[name]
		if sc.Type != "http" {
			continue
		}
		src := ingest.Source{Name: name, Pull: sc.Handoff == "pull", MaxAttempts: sc.MaxAttempts}
		if a := sc.Auth; a != nil {
			src.Auth = ingest.Auth{Scheme: a.Scheme, Secrets: a.Secrets, Header: a.Header, Tolerance: a.Tolerance.D()}
		}
		if r := sc.RateLimit; r != nil {
			src.RatePerSec, src.Burst = r.PerSecond, r.Burst
		}
		var err error
		if src.Rules, err = rules(name, sc, src.Auth.Header); err != nil {
			return fmt.Errorf("inbox.sources.%s: %w", name, err)
		}
		sources = append(sources, src)
	}
	if len(sources) == 0 {
		return nil
	}
	h, err := ingest.New(s.table, sources, ingest.Options{MaxBodyBytes: int64(s.cfg.Inbox.MaxBodyBytes), Logger: s.log, Observer: s.metrics})
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Inbox.Listen)
	if err != nil {
		return fmt.Errorf("inbox.listen %s: %w (is another process using the port?)", s.cfg.Inbox.Listen, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10}
	s.log.Info("inbox ingest listening", "addr", ln.Addr().String(), "sources", len(sources))
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("inbox ingest server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Relay.ShutdownTimeout.D())
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}

// brokerSource is a running broker source.
type brokerSource interface{ Run(context.Context) error }

func (s *inboxService) startSources(ctx context.Context, names []string) error {
	for _, name := range names {
		sc := s.cfg.Inbox.Sources[name]
		if sc.Type == "http" {
			continue
		}
		r, err := rules(name, sc)
		if err != nil {
			return fmt.Errorf("inbox.sources.%s: %w", name, err)
		}
		sink := &source.Sink{Store: s.table, Rules: r, Pull: sc.Handoff == "pull", MaxAttempts: sc.MaxAttempts, Observer: s.metrics, Logger: s.log}
		src, err := s.openSource(ctx, sink, sc)
		if err != nil {
			return fmt.Errorf("inbox.sources.%s: %w", name, err)
		}
		s.log.Info("inbox source started", "source", name, "type", sc.Type)
		s.wg.Add(1)
		go func() { defer s.wg.Done(); _ = src.Run(ctx) }()
	}
	return nil
}

func (s *inboxService) openSource(ctx context.Context, sink *source.Sink, sc config.InboxSource) (brokerSource, error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	switch sc.Type {
	case "nats":
		return natssource.New(octx, sink, natssource.Options{Servers: sc.Servers, Stream: sc.Stream, Consumer: sc.Consumer, Subjects: sc.Subjects, Headers: sink.Rules.Headers})
	case "kafka":
		return kafkasource.New(sink, kafkasource.Options{Brokers: sc.Brokers, Topics: sc.Topics, Group: sc.Group, Headers: sink.Rules.Headers, RecordKeyOrders: true})
	case "amqp":
		return amqpsource.New(octx, sink, amqpsource.Options{URL: sc.URL, Queue: sc.Queue, Prefetch: sc.Prefetch, Headers: sink.Rules.Headers})
	}
	return nil, fmt.Errorf("unknown source type %q", sc.Type)
}

// startTableUpkeep refreshes the inbox gauges and runs inbox.retention,
// with the outbox dialect's stats and purge on the inbox table.
func (s *inboxService) startTableUpkeep(ctx context.Context) {
	d, err := postgres.New(s.pool, s.table.Mapping().Mapping)
	if err != nil {
		s.log.Warn("inbox: no table statistics", "err", err)
		return
	}
	if age := s.cfg.Inbox.Retention.MaxAge.D(); age > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			relay.RunRetention(ctx, d, relay.RetentionOptions{SentMaxAge: age, DeadMaxAge: age, Logger: s.log, Observer: s.metrics})
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(backlogInterval)
		defer t.Stop()
		for {
			cctx, cancel := context.WithTimeout(ctx, backlogInterval)
			st, err := d.Stats(cctx, dialect.StatsParams{WithoutSent: true})
			cancel()
			if err == nil {
				s.metrics.Pending.Set(float64(st.ByState["pending"]))
				s.metrics.Processing.Set(float64(st.ByState["processing"]))
				s.metrics.Dead.Set(float64(st.ByState["dead"]))
				s.metrics.OldestPendingAge.Set(st.OldestPendingAge.Seconds())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// migrateInbox applies (or shows) the inbox table's migrations when the
// configuration has an inbox, in the schema of inbox.table when it is
// qualified, and adds them to res.
func migrateInbox(ctx context.Context, cfg *config.Config, action string, prog newMigrateProgress, res *migrateResult) error {
	if !cfg.Inbox.Enabled() {
		return nil
	}
	m, err := inbox.NewMapping(cfg.Inbox.Table, cfg.Inbox.Columns)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	if m.TableName() != inbox.MessagesTable || len(cfg.Inbox.Columns) > 0 {
		return fmt.Errorf("migrate creates the inbox table %q, but inbox.table or inbox.columns name another table: create it yourself, or set inbox.table to inbox or <schema>.inbox", inbox.MessagesTable)
	}
	pool, err := openPostgres(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig.Copy()
	versions := migrations.InboxVersionTable
	if schema := m.Schema(); schema != "" {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("migrate: creating schema %q: %w", schema, err)
		}
		cc.RuntimeParams["search_path"] = schema
		versions = pgx.Identifier{schema, versions}.Sanitize()
	}
	tracked := true
	if action == "status" {
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versions).Scan(&tracked); err != nil {
			return fmt.Errorf("migrate status: %w", err)
		}
	}
	db := stdlib.OpenDB(*cc)
	defer db.Close()
	p, err := migrations.NewInboxProvider("postgresql", db)
	if err != nil {
		return err
	}
	in, err := runMigrations(ctx, p, action, tracked, prog)
	if err != nil {
		return fmt.Errorf("inbox table: %w", err)
	}
	res.status = append(res.status, in.status...)
	res.applied = append(res.applied, in.applied...)
	return nil
}
