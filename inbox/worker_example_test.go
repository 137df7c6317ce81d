package inbox_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/inbox"
)

// A pull source's messages applied once each, in per-key order: the
// effect and the processed mark commit in one transaction.
func ExampleNewWorker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	w, err := inbox.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET events = events + 1 WHERE id = $1`, m.Key)
		return err // an error rolls back the effect and retries the message later
	}, inbox.WorkerOptions{Source: "payments", Concurrency: 4})
	if err != nil {
		log.Print(err)
		return
	}
	_ = w.Run(ctx) // until ctx ends
}
