// Command inboxservice is the application half of a receiving service:
// `queuebox run` with examples/inboxservice/queuebox.yaml verifies and
// stores GitHub push webhooks in the inbox table (handoff: pull), and this
// program applies each one exactly once with inbox.Worker: it counts the
// pushes and commits of each repository in the transaction that marks the
// inbox row processed, in per-repository order.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
//	  go run ./examples/inboxservice
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/outbox"
)

// Schema is the service's own table.
const Schema = `CREATE TABLE IF NOT EXISTS repo_pushes (
    repo    TEXT PRIMARY KEY,
    pushes  INT  NOT NULL,
    commits INT  NOT NULL,
    head    TEXT NOT NULL
)`

// push is the part of GitHub's push event the service reads.
type push struct {
	After      string `json:"after"`
	Commits    []any  `json:"commits"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

// Apply counts one push event in tx. A body without a repository can
// never be applied: it is dead at once.
func Apply(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
	if m.Topic != "github.push" {
		return nil // other events: marked processed, nothing to do
	}
	var p push
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.Repository.FullName == "" {
		return outbox.Permanent(fmt.Errorf("not a push event: %v", err))
	}
	_, err := tx.Exec(ctx, `INSERT INTO repo_pushes (repo, pushes, commits, head) VALUES ($1, 1, $2, $3)
        ON CONFLICT (repo) DO UPDATE SET pushes = repo_pushes.pushes + 1,
            commits = repo_pushes.commits + EXCLUDED.commits, head = EXCLUDED.head`,
		p.Repository.FullName, len(p.Commits), p.After)
	return err
}

// Run applies the github source's messages until ctx ends.
func Run(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	if _, err := pool.Exec(ctx, Schema); err != nil {
		return err
	}
	w, err := inbox.NewWorker(pool, Apply, inbox.WorkerOptions{Source: "github", Concurrency: 4, Logger: log})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		log.Error("set DATABASE_URL to the database of the inbox table")
		os.Exit(2)
	}
	if err := serve(url, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("inboxservice", "err", err)
		os.Exit(1)
	}
}

// serve runs the service until SIGINT or SIGTERM.
func serve(url string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return Run(ctx, pool, log)
}
