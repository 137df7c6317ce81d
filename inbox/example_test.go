package inbox_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/inbox"
)

// Apply a message once: the inbox record and the effect commit together.
// (Not run: it needs a database with the inbox table, see Migrate.)
func ExampleInbox_RecordPgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	ib, _ := inbox.New()

	messageID := "0190a5b8-0000-7000-8000-000000000001" // from natsinbox.FromJetStream, inbox.FromHTTP, ...
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	isNew, err := ib.RecordPgx(ctx, tx, "billing", messageID)
	if err != nil {
		panic(err)
	}
	if isNew {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 42 WHERE id = 7`); err != nil {
			panic(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	// Acknowledge the message only now.
}

func ExampleFromHTTP() {
	r := httptest.NewRequest("POST", "/hooks/order.created", nil)
	r.Header.Set("X-Message-Id", "0190a5b8-0000-7000-8000-000000000001")
	id, ok := inbox.FromHTTP(r)
	fmt.Println(id, ok)
	// Output: 0190a5b8-0000-7000-8000-000000000001 true
}
