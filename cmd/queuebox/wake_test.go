package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestWakeOnCommitWithoutPolling runs two relays that poll every 30 s with
// relay.notify on: only the wake can deliver within the test's bounds.
// Producers notify only while a relay sleeps (the gate that keeps NOTIFY
// from serialising their commits), so a wake lost between a relay's last
// claim and its sleep would leave rows pending for the whole poll
// interval. Producers commit single rows side by side while the relays
// keep falling asleep and waking, which is where such a race would show.
// Then one relay stops: the other must arm in its place.
func TestWakeOnCommitWithoutPolling(t *testing.T) {
	w := newWorld(t, 0)
	channel := testenv.UniqueName("qbwake")
	cfg := w.config(t, fmt.Sprintf("pollInterval: 30s\nmaxPollInterval: 30s\nnotify: {channel: %s, createTrigger: true}", channel))
	a := startQueuebox(t, "run", "--config", cfg)
	b := startQueuebox(t, "run", "--config", cfg)
	ctx := testenv.Context(t, 2*time.Minute)

	asleep := func() bool {
		return testenv.AdvisoryLockHolders(t, ctx, w.pg.Pool, postgres.NotifyLockClass, channel) == 1
	}
	testenv.Eventually(t, 30*time.Second, asleep, "the idle relays never armed the notification")

	// One row into the sleeping relay.
	insertOne := func(key string, n int) {
		if _, err := w.pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('hook.created', $1, jsonb_build_object('n', $2::int))`, key, n); err != nil {
			t.Error(err)
		}
	}
	insertOne("key-first", 0)
	waitAllSent(t, w.pg.Pool, 1, 10*time.Second)

	// Producers side by side, each on keys of its own, with pauses that let
	// the relay fall asleep between rows.
	const producers, perProducer = 4, 150
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				insertOne(fmt.Sprintf("key-%d", p), i)
				if i%3 == p%3 {
					time.Sleep(time.Duration(i%7) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	total := 1 + producers*perProducer
	waitAllSent(t, w.pg.Pool, total, 15*time.Second)
	testenv.Eventually(t, 10*time.Second, asleep, "the relays did not arm again once idle")

	// One relay goes; whichever held the lock, the other wakes for the
	// next row.
	if code := a.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}
	testenv.Eventually(t, 10*time.Second, asleep, "the remaining relay did not arm")
	insertOne("key-last", 0)
	waitAllSent(t, w.pg.Pool, total+1, 10*time.Second)

	// The remaining relay's wake metrics: listening, notified, and (idle
	// again) holding the lock.
	metric := func(name string) float64 {
		v, ok := testenv.LookupMetric(testenv.Scrape(t, b.ManagementAddr()), name)
		if !ok {
			t.Fatalf("no %s in the scrape", name)
		}
		return v
	}
	if v := metric("queuebox_wake_listening"); v != 1 {
		t.Errorf("queuebox_wake_listening = %v, want 1", v)
	}
	if v := metric("queuebox_wake_notifications_total"); v < 1 {
		t.Errorf("queuebox_wake_notifications_total = %v, want at least the last row's", v)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return metric("queuebox_wake_armed") == 1 }, "queuebox_wake_armed never 1 on the idle relay")
	// Its claims took the table's claim turn (the default), each timed.
	if v := metric("queuebox_claim_turn_wait_seconds_count"); v < 1 {
		t.Errorf("queuebox_claim_turn_wait_seconds_count = %v, want every claim's wait", v)
	}
	if code := b.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}
	checkDeliveries(t, "HTTP", w.hooks.deliveries(), rowIDs(t, w.pg.Pool), "hook.", false)
}

// TestCheckNotifyTrigger: queuebox check says when the wake-on-commit
// trigger cannot wake the relay (another channel) or serialises the
// producers' commits (an earlier release's function).
func TestCheckNotifyTrigger(t *testing.T) {
	w := newWorld(t, 0)
	check := func(notify string) (int, string) {
		t.Helper()
		cfg := w.config(t, "notify: "+notify)
		cmd := exec.Command(binPath, "check", "--config", cfg)
		cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := check("{channel: qbcheck, createTrigger: true}"); code != 0 || !strings.Contains(out, "not installed yet") {
		t.Fatalf("no trigger, createTrigger: exit %d\n%s", code, out)
	}
	if code, out := check("{channel: qbcheck}"); code != 0 || !strings.Contains(out, "no trigger outbox_qb_notify") {
		t.Fatalf("no trigger, application notifies: exit %d\n%s", code, out)
	}
	exec1 := func(sql string) {
		t.Helper()
		if _, err := w.pg.Pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	exec1(`CREATE FUNCTION outbox_qb_notify() RETURNS trigger LANGUAGE plpgsql AS $qb$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(29026, hashtext('qbcheck')) THEN
        PERFORM pg_notify('qbcheck', '');
    END IF;
    RETURN NULL;
END
$qb$`)
	exec1(`CREATE TRIGGER outbox_qb_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_qb_notify()`)
	if code, out := check("{channel: qbcheck}"); code != 0 || !strings.Contains(out, `ok    relay.notify: trigger outbox_qb_notify notifies "qbcheck" while a relay sleeps`) {
		t.Fatalf("gated trigger on the channel: exit %d\n%s", code, out)
	}
	code, out := check("{channel: other}")
	if code != 1 || !strings.Contains(out, `notifies channel "qbcheck", but the relay listens on "other"`) || !strings.Contains(out, `set relay.notify.channel: "qbcheck"`) {
		t.Fatalf("trigger on another channel: exit %d, want 1 and the cause\n%s", code, out)
	}
	exec1(`CREATE OR REPLACE FUNCTION outbox_qb_notify() RETURNS trigger LANGUAGE plpgsql AS $qb$
BEGIN
    PERFORM pg_notify('qbcheck', '');
    RETURN NULL;
END
$qb$`)
	if code, out := check("{channel: qbcheck}"); code != 0 || !strings.Contains(out, "notifies on every insert") {
		t.Fatalf("earlier release's trigger: exit %d, want 0 and a warning\n%s", code, out)
	}
}
