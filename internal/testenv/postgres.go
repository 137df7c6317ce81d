package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/migrations"
)

// DefaultPostgresURL is used when QUEUEBOX_TEST_POSTGRES_URL is unset.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PG is a PostgreSQL world owned by one test: a fresh schema, a pool whose
// connections have it as search_path, and a URL that does the same for a
// separately started process.
type PG struct {
	Pool   *pgxpool.Pool
	Schema string // qb_<random>, a plain lower-case identifier
	URL    string // the server URL with options=-c search_path=<Schema>
}

type pgOptions struct {
	migrate  bool
	maxConns int32
	ownDB    bool
}

// PGOption changes what Postgres sets up.
type PGOption func(*pgOptions)

// WithoutMigrations leaves the schema empty instead of applying the bundled
// migrations.
func WithoutMigrations() PGOption { return func(o *pgOptions) { o.migrate = false } }

// WithOwnDatabase puts the schema in a database of the test's own, created
// for it and dropped after it. A schema created or dropped anywhere in a
// database makes every session of that database plan its prepared
// statements again (PostgreSQL's plancache.c invalidates all plans on a
// change to pg_namespace), so a test that needs a cached plan to stay as it was cannot
// share the database with tests that create schemas.
func WithOwnDatabase() PGOption { return func(o *pgOptions) { o.ownDB = true } }

// WithMaxConns sets the pool size (default 16).
func WithMaxConns(n int32) PGOption { return func(o *pgOptions) { o.maxConns = n } }

// Postgres connects to QUEUEBOX_TEST_POSTGRES_URL (or DefaultPostgresURL),
// creates a schema of the test's own, applies the bundled migrations to it
// unless WithoutMigrations is given, and drops the schema with CASCADE when
// the test ends. An unreachable server skips the test, or fails it under
// QUEUEBOX_REQUIRE_SERVICES=1.
func Postgres(t testing.TB, opts ...PGOption) *PG {
	t.Helper()
	o := pgOptions{migrate: true, maxConns: 16}
	for _, opt := range opts {
		opt(&o)
	}
	base := Env("QUEUEBOX_TEST_POSTGRES_URL", DefaultPostgresURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
		return nil
	}
	defer admin.Close(context.Background())

	if o.ownDB {
		name := "qb_" + randomHex(8)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("testenv: create database %s: %v", name, err)
		}
		// Registered first, so it runs after the schema's drop.
		dropAtEnd(t, base, "database "+name, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("testenv: parse QUEUEBOX_TEST_POSTGRES_URL: %v", err)
		}
		u.Path = "/" + name
		base = u.String()
		own, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatalf("testenv: connect to database %s: %v", name, err)
		}
		defer own.Close(context.Background())
		admin = own
	}

	schema := "qb_" + randomHex(8)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	dropAtEnd(t, base, "schema "+schema, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")

	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		t.Fatalf("testenv: parse QUEUEBOX_TEST_POSTGRES_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = o.maxConns

	if o.migrate {
		db := stdlib.OpenDB(*cfg.ConnConfig.Copy())
		provider, err := migrations.NewProvider("postgresql", db)
		if err == nil {
			_, err = provider.Up(ctx)
		}
		db.Close()
		if err != nil {
			t.Fatalf("testenv: migrate schema %s: %v", schema, err)
		}
	}

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: pool for schema %s: %v", schema, err)
	}
	t.Cleanup(pool.Close) // runs before the schema is dropped

	return &PG{Pool: pool, Schema: schema, URL: WithSearchPath(base, schema)}
}

// dropAtEnd runs stmt on a connection of its own to connURL when the test ends;
// what names the object for the error.
func dropAtEnd(t testing.TB, connURL, what, stmt string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, connURL)
		if err != nil {
			t.Errorf("testenv: drop %s: %v", what, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Errorf("testenv: drop %s: %v", what, err)
		}
	})
}

// WithSearchPath returns rawURL with the libpq options parameter set so that
// a connection made from it uses schema as its search_path. pgx and libpq
// both send options to the server at connect time.
func WithSearchPath(rawURL, schema string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set("options", "-c search_path="+schema)
	// Encode writes a space as "+", which pgx does not decode: use %20.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// InsertKeyed inserts n rows into the outbox table of pool's search_path,
// spread round-robin over len(next) keys named key-000, key-001, ...
// next[k] is the number of the next row of key k: each row carries the
// payload {"n": next[k]} and the topic topicOf(next[k]), and next[k] is
// advanced, so that successive calls continue each key's numbering.
// The rows go in statements of a few thousand, in order.
func InsertKeyed(ctx context.Context, pool *pgxpool.Pool, n int, next []int, topicOf func(n int) string) error {
	const chunk = 2000
	keys := len(next)
	for done := 0; done < n; done += chunk {
		var topics, ks, payloads []string
		for i := done; i < min(done+chunk, n); i++ {
			k := i % keys
			topics = append(topics, topicOf(next[k]))
			ks = append(ks, fmt.Sprintf("key-%03d", k))
			payloads = append(payloads, fmt.Sprintf(`{"n": %d}`, next[k]))
			next[k]++
		}
		_, err := pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload)
			SELECT t, k, p::jsonb FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY u(t, k, p, o) ORDER BY o`,
			topics, ks, payloads)
		if err != nil {
			return err
		}
	}
	return nil
}

// MustExec runs sql with args on the pool and fails t when it errors,
// naming the statement's first line.
func (p *PG) MustExec(t testing.TB, ctx context.Context, sql string, args ...any) {
	t.Helper()
	if _, err := p.Pool.Exec(ctx, sql, args...); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
		t.Fatalf("%s: %v", first, err)
	}
}

// AdvisoryLockHolders counts the sessions that hold the two-key advisory
// lock (class, hashtext(name)) exclusively: the wake-on-commit tests ask
// whether a relay sleeps holding the notify lock (postgres.NotifyLockClass,
// the channel).
func AdvisoryLockHolders(t testing.TB, ctx context.Context, pool *pgxpool.Pool, class int, name string) int {
	t.Helper()
	var held int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2 AND mode = 'ExclusiveLock'`, class, name).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	return held
}
