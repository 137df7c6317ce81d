package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/redact"
)

// connectTimeout bounds the first connection to the database: a database
// that does not answer fails the start, it does not hang it.
const connectTimeout = 10 * time.Second

// poolSize is the number of connections the relay needs: one claim or
// settle per in-flight batch, one lease renewal per batch, the reaper, the
// backlog refresh and the health check.
func poolSize(cfg *config.Config) int32 {
	if cfg.Database.MaxConns > 0 {
		return int32(cfg.Database.MaxConns)
	}
	return int32(2*cfg.Relay.InflightBatches + 4)
}

// openPostgres connects to cfg.Database.URL and checks that the server
// answers. Its errors name the server (never the password) and the fix.
func openPostgres(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid PostgreSQL connection string: %s", redact.String(err.Error(), cfg.Database.URL))
	}
	pc.MaxConns = poolSize(cfg)
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > connectTimeout {
		pc.ConnConfig.ConnectTimeout = connectTimeout
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "queuebox"
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
	msg := redact.String(err.Error(), url, pc.ConnConfig.Password)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"):
		return fmt.Errorf("database %s refused the credentials of user %q: %s (check database.url)", where, pc.ConnConfig.User, msg)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("database %q does not exist on %s: %s (check database.url)", pc.ConnConfig.Database, where, msg)
	default:
		return fmt.Errorf("cannot reach the database at %s: %s (check database.url and that PostgreSQL is running)", where, msg)
	}
}

// openDialect connects to the configured database and returns its dialect
// and a function that closes it.
func openDialect(ctx context.Context, cfg *config.Config) (dialect.Dialect, *pgxpool.Pool, error) {
	m, err := dialect.NewMapping(cfg.Database.OutboxTable, cfg.Database.Columns, cfg.Database.States)
	if err != nil {
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	switch cfg.Database.Type {
	case "postgresql", "":
		pool, err := openPostgres(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		d, err := postgres.New(pool, m)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return d, pool, nil
	case "sqlserver":
		return nil, nil, errors.New("database.type sqlserver: the SQL Server dialect is not built into this version yet (use postgresql)")
	default:
		return nil, nil, fmt.Errorf("database.type %q is not supported (want postgresql or sqlserver)", cfg.Database.Type)
	}
}
