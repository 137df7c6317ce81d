package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/relay"
)

// TestWorker hands 60 messages of 6 keys of a pull source to 4 concurrent
// handlers: each is applied once, in per-key order, inside the
// transaction that marks it processed; a failure is retried, a permanent
// one is dead with its reason, a handler that outlives the lease keeps it
// by renewal, and rows of another source are left alone.
func TestWorker(t *testing.T) {
	pg := testenv.InboxPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	pg.MustExec(t, ctx, `CREATE TABLE applied (seq BIGSERIAL, key TEXT, n INT, id TEXT UNIQUE)`)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(source, key string, n int, extra string) {
		payload := fmt.Sprintf(`{"n":%d%s}`, n, extra)
		if _, err := table.Receive(ctx, inbox.Row{Source: source, IdempotencyKey: fmt.Sprintf("%s-%d", key, n), Topic: "orders",
			Key: key, Payload: []byte(payload), Pull: true, MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	for n := range 10 {
		for k := range 6 {
			extra := ""
			switch {
			case k == 0 && n == 3:
				extra = `,"fail":"once"`
			case k == 1 && n == 5:
				extra = `,"slow":true`
			case k == 2 && n == 7:
				extra = `,"poison":true`
			}
			put("orders", fmt.Sprintf("k%d", k), n, extra)
		}
	}
	put("other", "k0", 0, "")
	handler := failingHandler()
	w, err := inbox.NewWorker(pg.Pool, handler, inbox.WorkerOptions{Source: "orders", Concurrency: 4, Lease: time.Second,
		PollInterval: 20 * time.Millisecond, Backoff: relay.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	count := func(q string) int {
		var n int
		if err := pg.Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return count(`SELECT count(*) FROM inbox WHERE source = 'orders' AND state IN ('pending', 'processing')`) == 0
	}, "the worker did not finish the source's rows")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := count(`SELECT count(*) FROM applied`); got != 59 {
		t.Errorf("%d effects committed, want 59 (60 less the poison one, whose transaction rolled back)", got)
	}
	if got := count(`SELECT count(*) FROM inbox WHERE source = 'orders' AND state = 'sent'`); got != 59 {
		t.Errorf("%d rows processed, want 59", got)
	}
	var lastError string
	var attempt int
	if err := pg.Pool.QueryRow(ctx, `SELECT attempt, last_error FROM inbox WHERE state = 'dead'`).Scan(&attempt, &lastError); err != nil || attempt != 1 || lastError != "cannot apply this one" {
		t.Errorf("dead row: attempt %d, last_error %q, %v; want 1 and the handler's error", attempt, lastError, err)
	}
	if got := count(`SELECT count(*) FROM inbox WHERE source = 'orders' AND idempotency_key = 'k0-3' AND attempt = 1`); got != 1 {
		t.Error("the message that failed once was not retried as attempt 1")
	}
	if got := count(`SELECT count(*) FROM inbox WHERE source = 'other' AND state = 'pending'`); got != 1 {
		t.Error("the worker touched another source's row")
	}
	checkKeyOrder(ctx, t, pg)
}

// failingHandler applies a message by inserting it into applied; it fails
// the message marked fail once, the poison one for good, and sleeps past
// the lease on the slow one.
func failingHandler() inbox.Handler {
	var failedOnce atomic.Bool
	return func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		var p struct {
			N      int
			Fail   string
			Slow   bool
			Poison bool
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO applied (key, n, id) VALUES ($1, $2, $3)`, m.Key, p.N, m.ID); err != nil {
			return err
		}
		switch {
		case p.Fail == "once" && failedOnce.CompareAndSwap(false, true):
			return errors.New("transient")
		case p.Poison:
			return outbox.Permanent(errors.New("cannot apply this one"))
		case p.Slow:
			time.Sleep(1500 * time.Millisecond) // past the lease of 1s
		}
		return nil
	}
}

// checkKeyOrder checks that each key's effects were committed in the order
// of its messages.
func checkKeyOrder(ctx context.Context, t *testing.T, pg *testenv.PG) {
	t.Helper()
	rows, err := pg.Pool.Query(ctx, `SELECT key, n FROM applied ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[key]; ok && n <= prev {
			t.Errorf("key %s: %d applied after %d", key, n, prev)
		}
		last[key] = n
	}
}
