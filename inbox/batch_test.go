package inbox_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestBatchClose closes a batching table while 200 receives are in flight:
// every one returns, and each one answered without an error is stored.
func TestBatchClose(t *testing.T) {
	pg := testenv.InboxPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	table.Batch(2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored := map[string]bool{}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := table.Receive(ctx, inbox.Row{Source: "s", IdempotencyKey: fmt.Sprint(i), Topic: "t", Payload: []byte(`{}`), Pull: true})
			if err == nil {
				mu.Lock()
				stored[rc.ID] = true
				mu.Unlock()
			}
		}()
		if i == 100 {
			go table.Close()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("receives still waiting after Close")
	}
	var n int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE id = ANY($1::uuid[])`, keys(stored)).Scan(&n); err != nil || n != len(stored) {
		t.Errorf("%d of %d answered receives stored (%v)", n, len(stored), err)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
