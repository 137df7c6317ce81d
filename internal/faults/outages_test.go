package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

func hookTopic(int) string { return "hook.created" }

// noStoredDuplicates fails t when the JetStream stream holds an id twice
// (a redelivery inside the duplicate window must be absorbed).
func noStoredDuplicates(t *testing.T, r Report) {
	t.Helper()
	if n := r.DuplicatesSeenBy["events"]; n > 0 {
		t.Fatalf("the JetStream stream holds %d duplicate ids; redeliveries inside the duplicate window must be absorbed", n)
	}
}

func setMaxAttempts(t *testing.T, w *world, n int) {
	t.Helper()
	if _, err := w.pg.Pool.Exec(context.Background(), `UPDATE outbox SET max_attempts = $1`, n); err != nil {
		t.Fatal(err)
	}
}

// TestFaultNATSRestart shuts an embedded JetStream server down while the
// relay publishes and starts it again on the same port and store.
func TestFaultNATSRestart(t *testing.T) {
	faultSuite(t)
	resetKeys()
	store := t.TempDir()
	srv := testenv.EmbeddedNATS(t, store, -1)
	port := testenv.EmbeddedNATSPort(srv)
	w := newWorld(t, worldOptions{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", port)})
	const total = 10000
	insert(t, w.pg.Pool, total, 100, orderTopic)
	cfg := w.config("batchSize: 100\npollInterval: 20ms\nlease: 5s\nreapInterval: 500ms\nbackoff: {base: 100ms, max: 2s}\ncircuitBreaker: {failures: 3, openFor: 500ms, maxOpenFor: 2s}", "")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	testenv.Eventually(t, time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= total/4 }, "no progress before the restart")
	srv.Shutdown()
	srv.WaitForShutdown()
	downAt := time.Now()
	atDown := countStates(t, w.pg.Pool)
	time.Sleep(3 * time.Second) // the outage
	testenv.EmbeddedNATS(t, store, port)
	upAt := time.Now()
	t.Logf("JetStream down for %v; table at shutdown %v", upAt.Sub(downAt).Round(time.Millisecond), atDown)
	if atDown["sent"] == total {
		t.Fatal("the relay finished before the restart; the test proves nothing")
	}
	settled := waitSettled(t, w.pg.Pool, 2*time.Minute)
	m := testenv.Scrape(t, addr)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	r := mustCheck(t, w.collect(time.Second))
	noStoredDuplicates(t, r)
	if r.Sent != total {
		t.Fatalf("sent %d of %d", r.Sent, total)
	}
	figure(t, "nats-restart", r, fmt.Sprintf("outage=%v recover(drain after restart)=%v deferred=%v retried=%v",
		upAt.Sub(downAt).Round(100*time.Millisecond), settled.Sub(upAt).Round(10*time.Millisecond),
		testenv.Metric(m, `queuebox_deliveries_total{destination="events",outcome="deferred"}`), testenv.Metric(m, `queuebox_deliveries_total{destination="events",outcome="retry"}`)))
}

// TestFaultDatabaseCut puts a TCP proxy between the relay and PostgreSQL
// and cuts every connection (refusing new ones) for five seconds.
func TestFaultDatabaseCut(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	proxy := w.throughProxy()
	const total = 10000
	insert(t, w.pg.Pool, total, 100, mixedTopic)
	cfg := w.config("batchSize: 100\npollInterval: 20ms\nlease: 3s\nreapInterval: 300ms\nbackoff: {base: 100ms, max: 2s}", "")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	testenv.Eventually(t, time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= total/4 }, "no progress before the cut")
	proxy.Cut()
	cutAt := time.Now()
	atCut := countStates(t, w.pg.Pool)
	time.Sleep(5 * time.Second) // the outage
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	if atCut["sent"] == total {
		t.Fatal("the relay finished before the cut; the test proves nothing")
	}
	var firstProgress time.Duration
	sentAtUp := sentCount(t, w.pg.Pool)
	testenv.Eventually(t, time.Minute, func() bool {
		if sentCount(t, w.pg.Pool) > sentAtUp {
			firstProgress = time.Since(upAt)
			return true
		}
		return false
	}, "no progress after the database came back")
	settled := waitSettled(t, w.pg.Pool, 2*time.Minute)
	m := testenv.Scrape(t, addr)
	if p.Exited() {
		t.Fatalf("the relay exited during the database outage:\n%s", testenv.Tail(p.Logs(), 20))
	}
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	r := mustCheck(t, w.collect(time.Second))
	noStoredDuplicates(t, r)
	figure(t, "database-cut", r, fmt.Sprintf("outage=%v first_progress_after_restore=%v drain_after_restore=%v claims_lost=%v reclaimed=%v",
		upAt.Sub(cutAt).Round(100*time.Millisecond), firstProgress.Round(10*time.Millisecond), settled.Sub(upAt).Round(10*time.Millisecond),
		testenv.Metric(m, "queuebox_claims_lost_total"), testenv.Metric(m, "queuebox_leases_reclaimed_total")))
}

// TestFaultPostgresRestart restarts a private PostgreSQL instance (initdb
// into a temporary directory; the machine's shared server is never
// touched) while the relay delivers.
func TestFaultPostgresRestart(t *testing.T) {
	faultSuite(t)
	resetKeys()
	pg := StartPrivatePostgres(t)
	t.Setenv("QUEUEBOX_TEST_POSTGRES_URL", pg.URL)
	w := newWorld(t, worldOptions{})
	const total = 10000
	insert(t, w.pg.Pool, total, 100, mixedTopic)
	cfg := w.config("batchSize: 100\npollInterval: 20ms\nlease: 3s\nreapInterval: 300ms\nbackoff: {base: 100ms, max: 2s}", "")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	testenv.Eventually(t, time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= total/4 }, "no progress before the restart")
	downAt := time.Now()
	pg.Stop("fast")
	time.Sleep(2 * time.Second) // the outage
	pg.Start()
	upAt := time.Now()
	settled := waitSettled(t, w.pg.Pool, 2*time.Minute)
	m := testenv.Scrape(t, addr)
	if p.Exited() {
		t.Fatalf("the relay exited during the database restart:\n%s", testenv.Tail(p.Logs(), 20))
	}
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	r := mustCheck(t, w.collect(time.Second))
	noStoredDuplicates(t, r)
	if r.Sent != total {
		t.Fatalf("sent %d of %d", r.Sent, total)
	}
	figure(t, "postgres-restart", r, fmt.Sprintf("outage=%v drain_after_restart=%v claims_lost=%v reclaimed=%v",
		upAt.Sub(downAt).Round(100*time.Millisecond), settled.Sub(upAt).Round(10*time.Millisecond),
		testenv.Metric(m, "queuebox_claims_lost_total"), testenv.Metric(m, "queuebox_leases_reclaimed_total")))
}

// TestFaultHTTPReceiver answers the first request of every row with one of
// four failures (hang past the timeout, 500, 429 with Retry-After: 1,
// connection closed) and accepts the next. A 429 spends no attempt, so the
// receiver counts requests, not the row's X-Attempt. max_attempts is 3: no
// row dies.
func TestFaultHTTPReceiver(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	w.hooks.hangFor = 1500 * time.Millisecond
	modes := []action{hang, fail500, fail429, hangup}
	names := map[action]string{hang: "hang", fail500: "500", fail429: "429", hangup: "close"}
	modeOf := func(id string) action { return modes[int(id[len(id)-1])%len(modes)] }
	var asked sync.Map
	w.hooks.setDecide(func(id string, _ int) action {
		if _, again := asked.LoadOrStore(id, true); !again {
			return modeOf(id)
		}
		return accept
	})
	const total = 400
	insert(t, w.pg.Pool, total, 40, hookTopic)
	setMaxAttempts(t, w, 3)
	cfg := w.config("batchSize: 50\npollInterval: 20ms\nlease: 5s\nbackoff: {base: 100ms, max: 1s, jitter: 0}", "timeout: 500ms")
	start := time.Now()
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	settled := waitSettled(t, w.pg.Pool, 2*time.Minute)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	in := w.collect(time.Second)
	r := mustCheck(t, in)
	if r.Sent != total || r.Dead != 0 {
		t.Fatalf("want all %d rows sent and none dead: %v", total, r)
	}
	// Retry-After honoured; the hung requests are the only duplicates.
	count := map[action]int{}
	var minGap429 time.Duration = time.Hour
	for _, row := range in.Rows {
		reqs := w.hooks.requestsOf(row.ID)
		if len(reqs) < 2 {
			t.Fatalf("row %s: %d requests, want a failed first attempt and a retry", row.ID, len(reqs))
		}
		m := modeOf(row.ID)
		count[m]++
		if m == fail429 {
			minGap429 = min(minGap429, reqs[1].At.Sub(reqs[0].At))
		}
	}
	if minGap429 < 900*time.Millisecond {
		t.Fatalf("a 429 with Retry-After: 1 was retried after %v", minGap429)
	}
	if r.DuplicatesSeen > count[hang] {
		t.Fatalf("%d duplicates seen, but only %d requests hung past the timeout", r.DuplicatesSeen, count[hang])
	}
	var parts []string
	for _, m := range modes {
		parts = append(parts, fmt.Sprintf("%s=%d", names[m], count[m]))
	}
	figure(t, "http-receiver", r, fmt.Sprintf("first_attempt_failures{%s} min_retry_after_429=%v drain=%v",
		strings.Join(parts, ","), minGap429.Round(10*time.Millisecond), settled.Sub(start).Round(10*time.Millisecond)))
}

// TestFaultLeaseShorterThanPublish freezes a relay (SIGSTOP: a GC pause, a
// VM migration, a clock jump) in the middle of a slow publish, longer than
// its 1s lease. A second replica reclaims and delivers the row; when the
// first one thaws, its publish succeeds but its completion is refused:
// exactly one duplicate with the same id, and claims_lost_total = 1.
func TestFaultLeaseShorterThanPublish(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	t.Cleanup(func() {
		select {
		case <-w.hooks.release:
		default:
			close(w.hooks.release)
		}
	})
	insert(t, w.pg.Pool, 1, 1, hookTopic)
	var slow string
	if err := w.pg.Pool.QueryRow(context.Background(), `SELECT id::text FROM outbox`).Scan(&slow); err != nil {
		t.Fatal(err)
	}
	var slowRequests atomic.Int64
	w.hooks.setDecide(func(id string, attempt int) action {
		if id == slow && slowRequests.Add(1) == 1 {
			return block
		}
		return accept
	})
	cfg := w.config("batchSize: 10\npollInterval: 20ms\nlease: 1s\nreapInterval: 100ms", "timeout: 30s")
	a := startQueuebox(t, "replica-a", "run", "--config", cfg)
	addrA := a.ManagementAddr()
	testenv.Eventually(t, 30*time.Second, func() bool { return slowRequests.Load() >= 1 }, "replica A never posted the row")
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	b := startQueuebox(t, "replica-b", "run", "--config", cfg)
	addrB := b.ManagementAddr()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(w.hooks.deliveries()) >= 1 }, "replica B never redelivered the row")
	redelivered := time.Since(frozenAt)
	insert(t, w.pg.Pool, 50, 10, hookTopic) // other rows keep flowing
	close(w.hooks.release)                  // A's slow request now succeeds
	testenv.Eventually(t, 30*time.Second, func() bool { return len(w.hooks.deliveries()) >= 52 }, "deliveries missing")
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var lost float64
	testenv.Eventually(t, 30*time.Second, func() bool {
		lost = testenv.Metric(testenv.Scrape(t, addrA), "queuebox_claims_lost_total")
		return lost >= 1
	}, "replica A's stale completion was not counted as a lost claim")
	waitSettled(t, w.pg.Pool, time.Minute)
	lostB := testenv.Metric(testenv.Scrape(t, addrB), "queuebox_claims_lost_total")
	for _, p := range []*testenv.Process{a, b} {
		if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("%s: exit status %d after SIGTERM", p.Name(), code)
		}
	}
	r := mustCheck(t, w.collect(time.Second))
	if r.DuplicatesSeen != 1 || lost != 1 || lostB != 0 {
		t.Fatalf("want exactly one duplicate (same id) and one lost claim on A: duplicates %d, lost A %v B %v", r.DuplicatesSeen, lost, lostB)
	}
	figure(t, "lease-shorter-than-publish", r, fmt.Sprintf("claims_lost_A=%v claims_lost_B=%v redelivered_after_freeze=%v", lost, lostB, redelivered.Round(10*time.Millisecond)))
}

// TestFaultDestinationDown takes both destinations away (JetStream shut
// down, the HTTP receiver refusing connections) for 20s (2 minutes with
// QUEUEBOX_SOAK=1), with max_attempts 3 and rows committed during the
// outage: no row dies, and all are delivered soon after the return.
func TestFaultDestinationDown(t *testing.T) {
	faultSuite(t)
	resetKeys()
	outage := 20 * time.Second
	if soak() {
		outage = 2 * time.Minute
	}
	store := t.TempDir()
	srv := testenv.EmbeddedNATS(t, store, -1)
	port := testenv.EmbeddedNATSPort(srv)
	w := newWorld(t, worldOptions{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", port)})
	insert(t, w.pg.Pool, 3000, 50, mixedTopic)
	setMaxAttempts(t, w, 3)
	cfg := w.config("batchSize: 100\npollInterval: 20ms\nlease: 5s\nreapInterval: 500ms\nbackoff: {base: 200ms, max: 2s}\ncircuitBreaker: {failures: 3, openFor: 1s, maxOpenFor: 5s}", "timeout: 2s")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	testenv.Eventually(t, time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= 300 }, "no progress before the outage")
	srv.Shutdown()
	srv.WaitForShutdown()
	w.hooks.down()
	downAt := time.Now()
	insert(t, w.pg.Pool, 1000, 50, mixedTopic) // committed during the outage
	setMaxAttempts(t, w, 3)
	// The circuit states seen during the outage (0 closed, 1 open, 2
	// half-open): recorded, not asserted (a batch opens the circuit only
	// when every message in it failed at the connection level).
	open := map[string]float64{}
	for time.Until(downAt.Add(outage)) > 0 {
		m := testenv.Scrape(t, addr)
		for _, d := range []string{"events", "hooks"} {
			open[d] = max(open[d], testenv.Metric(m, fmt.Sprintf(`queuebox_destination_circuit_state{destination=%q}`, d)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Until(downAt.Add(outage))) // the rest of the outage
	during := countStates(t, w.pg.Pool)
	mid := testenv.Scrape(t, addr)
	if during["dead"] != 0 {
		t.Fatalf("rows went dead while the destinations were down: %v", during)
	}
	testenv.EmbeddedNATS(t, store, port)
	w.hooks.up()
	upAt := time.Now()
	settled := waitSettled(t, w.pg.Pool, time.Minute+30*time.Second)
	recover := settled.Sub(upAt)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	r := mustCheck(t, w.collect(time.Second))
	noStoredDuplicates(t, r)
	if r.Dead != 0 || r.Sent != 4000 {
		t.Fatalf("want 4000 sent and none dead: %v", r)
	}
	if recover > time.Minute {
		t.Fatalf("delivered %v after the destinations returned; want within a minute", recover)
	}
	var maxAttempt int
	_ = w.pg.Pool.QueryRow(context.Background(), `SELECT coalesce(max(attempt), 0) FROM outbox`).Scan(&maxAttempt)
	figure(t, "destination-down", r, fmt.Sprintf("outage=%v recover(all delivered after return)=%v circuit_during={events:%v hooks:%v} deferred_during={events:%v hooks:%v} retried_during={events:%v hooks:%v} max_attempt=%d",
		upAt.Sub(downAt).Round(100*time.Millisecond), recover.Round(10*time.Millisecond), open["events"], open["hooks"],
		testenv.Metric(mid, `queuebox_deliveries_total{destination="events",outcome="deferred"}`), testenv.Metric(mid, `queuebox_deliveries_total{destination="hooks",outcome="deferred"}`),
		testenv.Metric(mid, `queuebox_deliveries_total{destination="events",outcome="retry"}`), testenv.Metric(mid, `queuebox_deliveries_total{destination="hooks",outcome="retry"}`), maxAttempt))
}
