package faults

import (
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestFaultWakeAfterDatabaseCut cuts every connection of a relay that
// relies on wake on commit (polls 30 s apart): the pool, the LISTEN
// connection and the one holding the notify lock. The lock goes with its
// connection, so producers stop notifying; once the database is back the
// relay must listen and arm again by itself, and rows written after that
// must be delivered by the wake, well within one poll.
func TestFaultWakeAfterDatabaseCut(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	proxy := w.throughProxy()
	channel := testenv.UniqueName("qbfwake")
	cfg := w.config("batchSize: 100\npollInterval: 30s\nmaxPollInterval: 30s\nnotify: {channel: "+channel+", createTrigger: true}", "")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	ctx := testenv.Context(t, 3*time.Minute)

	armed := func() bool {
		return testenv.AdvisoryLockHolders(t, ctx, w.pg.Pool, postgres.NotifyLockClass, channel) == 1
	}
	testenv.Eventually(t, 30*time.Second, armed, "the idle relay never armed")
	insert(t, w.pg.Pool, 100, 10, mixedTopic)
	waitSettled(t, w.pg.Pool, 10*time.Second)

	proxy.Cut()
	testenv.Eventually(t, 10*time.Second, func() bool { return !armed() }, "the notify lock outlived its cut connection")
	time.Sleep(2 * time.Second) // the outage
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	testenv.Eventually(t, 20*time.Second, armed, "the relay did not arm again after the database came back")
	rearmed := time.Since(upAt)

	insert(t, w.pg.Pool, 100, 10, mixedTopic)
	waitSettled(t, w.pg.Pool, 10*time.Second) // a poll is 30 s away: the wake delivered them
	if v, _ := testenv.LookupMetric(testenv.Scrape(t, addr), "queuebox_wake_listening"); v != 1 {
		t.Errorf("queuebox_wake_listening = %v after the reconnect, want 1", v)
	}
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	r := mustCheck(t, w.collect(time.Second))
	noStoredDuplicates(t, r)
	if r.Sent != 200 {
		t.Fatalf("sent %d of 200", r.Sent)
	}
	figure(t, "wake-database-cut", r, "rearmed_after_restore="+rearmed.Round(10*time.Millisecond).String())
}
