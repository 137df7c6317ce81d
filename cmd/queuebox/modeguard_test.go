package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestLeaseRelayStopsWhenBucketRelaysJoin: a bucket-mode relay that starts
// on an idle table finds no row processing under a lease, so nothing
// tells it that a lease-mode relay is at work there; the lease-mode relay
// sees the new member within bucketGuardInterval and stops, exit status 1
// with the reason, and the bucket-mode relay delivers the rows alone.
func TestLeaseRelayStopsWhenBucketRelaysJoin(t *testing.T) {
	w := newWorld(t, 0)
	lease := startQueuebox(t, "run", "--config", w.config(t, "claimMode: lease\nlease: 3s\npollInterval: 20ms"))
	lease.ManagementAddr()
	buckets := startQueuebox(t, "run", "--config", w.config(t, "claimMode: buckets\nlease: 3s\npollInterval: 20ms"))
	buckets.ManagementAddr()
	joined := time.Now()

	testenv.Eventually(t, bucketGuardInterval+10*time.Second, lease.Exited, "the lease-mode relay still runs beside a bucket-mode relay")
	t.Logf("lease-mode relay stopped %v after the bucket-mode relay started", time.Since(joined).Round(time.Millisecond))
	if code := lease.Stop(syscall.SIGTERM, time.Second); code != 1 {
		t.Errorf("lease-mode relay exit status %d, want 1", code)
	}
	if logs := lease.Logs(); !strings.Contains(logs, "1 relay(s) in bucket mode") || !strings.Contains(logs, "would claim in lease mode") {
		t.Errorf("the lease-mode relay's output does not name the cause:\n%s", testenv.Tail(logs, 10))
	}
	if buckets.Exited() {
		t.Fatalf("the bucket-mode relay exited:\n%s", testenv.Tail(buckets.Logs(), 20))
	}
	insert(t, w.pg.Pool, 200, 20, func(int) string { return "order.created" })
	testenv.Eventually(t, 30*time.Second, func() bool { return countStates(t, w.pg.Pool)["sent"] == 200 }, "the bucket-mode relay did not deliver the rows")
}
