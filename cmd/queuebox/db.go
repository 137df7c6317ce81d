package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	_ "github.com/microsoft/go-mssqldb" // registers the "sqlserver" driver

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/dialect/sqlserver"
	"github.com/queuebox/queuebox/redact"
)

// connectTimeout bounds the first connection to the database: a database
// that does not answer fails the start, it does not hang it.
const connectTimeout = 10 * time.Second

// poolSize is the number of connections the relay needs: the claim, the
// settlements, the lease renewals, the reaper, the backlog refresh, the
// health check and retention; in lock mode also one for each claim in
// flight, which holds its transaction open until its rows are settled.
func poolSize(cfg *config.Config) int32 {
	if cfg.Database.MaxConns > 0 {
		return int32(cfg.Database.MaxConns)
	}
	claims := (cfg.Relay.MaxInflight + cfg.Relay.BatchSize - 1) / max(cfg.Relay.BatchSize, 1)
	return int32(max(8, claims+4))
}

// openPostgres connects to cfg.Database.URL and checks that the server
// answers. Its errors name the server (never the password) and the fix.
func openPostgres(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	return openPostgresFor(ctx, cfg, false)
}

// openPostgresFor is openPostgres; forRelay applies the settings of the
// relay's own connections (database.synchronousCommit, a plan for each
// execution: postgres.PlanEachExecution, and no JIT: postgres.NoJIT).
func openPostgresFor(ctx context.Context, cfg *config.Config, forRelay bool) (*pgxpool.Pool, error) {
	if scheme, _, ok := strings.Cut(cfg.Database.URL, "://"); ok && scheme != "postgres" && scheme != "postgresql" && !strings.ContainsAny(scheme, " =") {
		return nil, fmt.Errorf("database.url is a %s:// URL; database.type postgresql needs postgres://user@host:5432/dbname (or a key=value connection string)", scheme)
	}
	pc, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid PostgreSQL connection string: %s; write it as postgres://user@host:5432/dbname (the password after user:), or as key=value pairs (host=… dbname=…)", redact.String(err.Error(), cfg.Database.URL))
	}
	pc.MaxConns = poolSize(cfg)
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > connectTimeout {
		pc.ConnConfig.ConnectTimeout = connectTimeout
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "queuebox"
	}
	if forRelay && cfg.Database.SynchronousCommit != "" {
		// The relay's bookkeeping need not wait for the WAL flush: a commit
		// lost in a database crash is a claim or a completion that did not
		// happen, so its rows are delivered again with the same ids, and
		// the application's rows are committed by the application. See
		// docs/configuration.md.
		pc.ConnConfig.RuntimeParams["synchronous_commit"] = cfg.Database.SynchronousCommit
	}
	if forRelay {
		// Plans made for the table as it is at each execution, not kept
		// from when it was empty (postgres.PlanEachExecution); and none
		// compiled at each execution (postgres.NoJIT).
		postgres.PlanEachExecution(pc.ConnConfig)
		postgres.NoJIT(pc.ConnConfig)
		postgres.NoBitmapScans(pc.ConnConfig)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, describeDBError(pc, err, cfg.Database.URL)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, describeDBError(pc, err, cfg.Database.URL)
	}
	return pool, nil
}

func describeDBError(pc *pgxpool.Config, err error, url string) error {
	where := net.JoinHostPort(pc.ConnConfig.Host, fmt.Sprint(pc.ConnConfig.Port))
	msg := dedupLines(redact.String(err.Error(), url, pc.ConnConfig.Password))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "28P01":
		return fmt.Errorf("database %s refused the password of user %q: %s (check database.url)", where, pc.ConnConfig.User, msg)
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		// invalid_authorization_specification: no such role, or no
		// pg_hba.conf line lets it in.
		return fmt.Errorf("database %s does not let user %q in: %s (the role may not exist, or pg_hba.conf has no entry for it; check database.url)", where, pc.ConnConfig.User, msg)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("database %q does not exist on %s: %s (check database.url)", pc.ConnConfig.Database, where, msg)
	default:
		return fmt.Errorf("cannot reach the database at %s: %s (check database.url and that PostgreSQL is running)", where, msg)
	}
}

// dedupLines drops the lines of s that repeat an earlier one: pgx reports
// each connection attempt (with sslmode=prefer, one with TLS and one
// without), and both usually fail alike.
func dedupLines(s string) string {
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// database is an open connection to the configured outbox database: its
// dialect plus what the process needs around it (a health ping, a
// description without secrets, Close).
type database struct {
	dialect.Dialect
	pool *pgxpool.Pool       // PostgreSQL
	sql  *sql.DB             // SQL Server
	desc string              // host:port/database as user, never the password
	plan *postgres.TablePlan // PostgreSQL: how the table is used (claim mode, absent columns)
}

// mixedModesError is why a relay in mode may not claim beside members
// relays in bucket mode.
type mixedModesError struct {
	members int
	mode    string
}

func (e mixedModesError) Error() string {
	return fmt.Sprintf("database: %d relay(s) in bucket mode (relay.claimMode: buckets) are at work on this table, and this relay would claim in %s mode: both would publish the same rows; use the same relay.claimMode on every relay (stop them all to change it)", e.members, e.mode)
}

// bucketGuardInterval is how often a lease- or lock-mode relay looks for
// bucket-mode relays that joined its table after it started
// (watchBucketMembers).
const bucketGuardInterval = 5 * time.Second

// watchBucketMembers stops a PostgreSQL relay in lease or lock mode, with
// mixedModesError as the cause, once relays in bucket mode are members of
// its table: a bucket-mode relay that started while this one was idle
// (no row processing) found nothing to wait for, and the two would
// publish the same rows. It returns at once for other relays, and when
// ctx ends. A failed look is tried again at the next interval.
func (d *database) watchBucketMembers(ctx context.Context, every time.Duration, stop context.CancelCauseFunc) {
	if d.pool == nil || d.plan == nil || d.plan.Mode == postgres.ModeBuckets {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, every)
		n, err := postgres.LiveBucketMembers(qctx, d.pool, d.plan.Mapping)
		cancel()
		if err == nil && n > 0 {
			stop(mixedModesError{n, d.plan.Mode})
			return
		}
	}
}

// Ping checks that the database answers.
func (d *database) Ping(ctx context.Context) error {
	if d.pool != nil {
		return d.pool.Ping(ctx)
	}
	return d.sql.PingContext(ctx)
}

// Close closes the connections. It is idempotent.
func (d *database) Close() {
	if c, ok := d.Dialect.(interface{ Close() }); ok {
		c.Close() // lock mode rolls back its open batches; bucket mode leaves the group
	}
	if d.pool != nil {
		d.pool.Close()
	}
	if d.sql != nil {
		_ = d.sql.Close()
	}
}

// String describes the database without its password.
func (d *database) String() string { return d.desc }

// openDialect connects to the configured database and returns it with its
// dialect. Every error names its place (the database, or the configuration
// key at fault), the server (never the password) and the fix, so callers
// print it as it is.
func openDialect(ctx context.Context, cfg *config.Config) (*database, error) {
	return openDialectFor(ctx, cfg, false)
}

// openDialectFor is openDialect; forRelay opens the connections of `run`
// (openPostgresFor).
func openDialectFor(ctx context.Context, cfg *config.Config, forRelay bool) (*database, error) {
	m, err := dialect.NewMapping(cfg.Database.OutboxTable, cfg.Database.Columns, cfg.Database.States)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	switch cfg.Database.Type {
	case "postgresql", "":
		pool, err := openPostgresFor(ctx, cfg, forRelay)
		if err != nil {
			return nil, err
		}
		d, plan, err := openPostgresDialect(ctx, pool, m, cfg)
		if err != nil {
			pool.Close()
			return nil, err
		}
		if forRelay && plan.Mode != postgres.ModeBuckets {
			if n, err := postgres.LiveBucketMembers(ctx, pool, plan.Mapping); err == nil && n > 0 {
				pool.Close()
				return nil, mixedModesError{n, plan.Mode}
			}
		}
		cc := pool.Config().ConnConfig
		return &database{Dialect: d, pool: pool, plan: plan, desc: fmt.Sprintf("postgresql %s/%s as %s", net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port)), cc.Database, cc.User)}, nil
	case "sqlserver":
		if cfg.Relay.OnDead == "hold" {
			return nil, errors.New("relay.onDead: hold is not supported on SQL Server yet (use release)")
		}
		db, desc, err := openSQLServer(ctx, cfg)
		if err != nil {
			return nil, err
		}
		d, err := sqlserver.New(db, m)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("database: %w", err)
		}
		return &database{Dialect: d, sql: db, desc: desc}, nil
	default:
		return nil, fmt.Errorf("database.type %q is not supported (want postgresql or sqlserver)", cfg.Database.Type)
	}
}

// openSQLServer opens cfg.Database.URL with go-mssqldb and checks that the
// server answers within connectTimeout.
func openSQLServer(ctx context.Context, cfg *config.Config) (*sql.DB, string, error) {
	u, err := url.Parse(cfg.Database.URL)
	if err != nil || u.Scheme != "sqlserver" {
		return nil, "", fmt.Errorf("database.url is not a SQL Server URL (want sqlserver://user:password@host:1433?database=name)")
	}
	desc := fmt.Sprintf("sqlserver %s/%s as %s", u.Host, u.Query().Get("database"), u.User.Username())
	db, err := sql.Open(sqlserver.DriverName, cfg.Database.URL)
	if err != nil {
		return nil, "", fmt.Errorf("database.url: %s", redact.String(err.Error(), cfg.Database.URL))
	}
	db.SetMaxOpenConns(int(poolSize(cfg)))
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, "", fmt.Errorf("cannot reach the database at %s: %s (check database.url and that SQL Server is running)",
			u.Host, redact.String(err.Error(), cfg.Database.URL))
	}
	return db, desc, nil
}

// postgresDialect is the PostgreSQL dialect under d, in lease or lock
// mode; false on SQL Server.
func postgresDialect(d dialect.Dialect) (*postgres.Dialect, bool) {
	switch d := d.(type) {
	case *postgres.Dialect:
		return d, true
	case *postgres.LockDialect:
		return d.Dialect, true
	}
	return nil, false
}
