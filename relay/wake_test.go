package relay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/relay"
)

// TestArmedWorkerClaimsOnceMoreBeforeSleeping: a producer that found the
// relay awake commits without notifying; if that commit lands between the
// worker's empty claim and its arming, only a claim after the arming sees
// the row. Options.Arm plays that producer (it inserts the row, then
// reports a fresh arming); polls are 30 s apart and no wake ever comes, so
// the row is delivered within the test only if the worker claims once more
// before it sleeps.
func TestArmedWorkerClaimsOnceMoreBeforeSleeping(t *testing.T) {
	pg := testenv.Postgres(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()

	var arms atomic.Int64
	arm := func(ctx context.Context) (bool, error) {
		if arms.Add(1) > 1 {
			return false, nil // armed already: sleep
		}
		insertRows(t, pg.Pool, 1, "hook.created", 5)
		return true, nil
	}
	startEngine(t, pg, srv.URL, nil, relay.Options{
		PollInterval: 30 * time.Second, MaxPollInterval: 30 * time.Second, InflightBatches: 1,
		Wake: make(chan struct{}), Arm: arm,
	})
	testenv.Eventually(t, 10*time.Second, func() bool { return summary(t, pg.Pool)["sent"].n == 1 },
		"the row committed before the arming waits for the poll")
	if hits.Load() != 1 {
		t.Errorf("%d deliveries, want 1", hits.Load())
	}
	// The worker arms again after the delivery (its next claim is empty)
	// and then sleeps: no busy loop on a relay that is armed already.
	testenv.Eventually(t, 10*time.Second, func() bool { return arms.Load() >= 2 }, "no arming after the delivery")
	time.Sleep(200 * time.Millisecond)
	if n := arms.Load(); n != 2 {
		t.Errorf("Arm called %d times, want 2: the armed worker should sleep", n)
	}
}
