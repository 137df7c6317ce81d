package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/internal/testenv"
)

// notifyRig is one outbox table with the wake-on-commit trigger and
// listeners on a channel of its own.
type notifyRig struct {
	t       *testing.T
	ctx     context.Context
	d       *Dialect
	channel string
	stops   map[*Listener]func()
}

func newNotifyRig(t *testing.T) *notifyRig {
	pg := testenv.Postgres(t)
	r := &notifyRig{
		t: t, ctx: testenv.Context(t, 60*time.Second), d: newDialect(t, pg.Pool),
		channel: "qb_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12],
		stops:   map[*Listener]func(){},
	}
	if err := r.d.EnsureNotifyTrigger(r.ctx, r.channel); err != nil {
		t.Fatal(err)
	}
	return r
}

// listen starts a listener and waits until it listens (its first signal).
// A check, when given, is how often it looks at the lock (1 s).
func (r *notifyRig) listen(check ...time.Duration) *Listener {
	r.t.Helper()
	return r.listenWith(func(l *Listener) {
		if len(check) > 0 {
			l.arm.check = check[0]
		}
	})
}

// listenWith is listen with the listener set up by setup before it runs.
func (r *notifyRig) listenWith(setup func(*Listener)) *Listener {
	r.t.Helper()
	l, err := r.d.NewListener(r.channel, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	setup(l)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	stop := func() { cancel(); <-done }
	r.t.Cleanup(stop)
	r.stops[l] = stop
	r.signalled(l, "listening")
	return l
}

// stop ends l's Run and waits for it.
func (r *notifyRig) stop(l *Listener) { r.stops[l]() }

func (r *notifyRig) terminate(pid uint32) {
	r.t.Helper()
	if _, err := r.d.pool.Exec(r.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		r.t.Fatal(err)
	}
}

func (r *notifyRig) signalled(l *Listener, what string) {
	r.t.Helper()
	select {
	case <-l.C():
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s: no signal", what)
	}
}

func (r *notifyRig) quiet(l *Listener, what string) {
	r.t.Helper()
	select {
	case <-l.C():
		r.t.Errorf("%s: signalled", what)
	case <-time.After(300 * time.Millisecond):
	}
}

// begin opens a producer transaction that has inserted one row: the
// trigger has run, and holds what it takes until the end.
func (r *notifyRig) begin() pgx.Tx {
	r.t.Helper()
	tx, err := r.d.pool.Begin(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(r.ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`); err != nil {
		r.t.Fatal(err)
	}
	return tx
}

func (r *notifyRig) insert() {
	r.t.Helper()
	if err := r.begin().Commit(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// lock reports the relays' hold on the channel's notify lock: granted and
// waiting exclusive requests.
func (r *notifyRig) lock() (held, waiting int) {
	r.t.Helper()
	err := r.d.pool.QueryRow(r.ctx, `SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)
FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2 AND mode = 'ExclusiveLock'`,
		NotifyLockClass, r.channel).Scan(&held, &waiting)
	if err != nil {
		r.t.Fatal(err)
	}
	return held, waiting
}

// arm reports whether Arm armed the channel afresh.
func (r *notifyRig) arm(l *Listener) bool {
	r.t.Helper()
	fresh, _ := r.armState(l)
	return fresh
}

// armState reports both answers of Arm; a fresh arming is watched too.
func (r *notifyRig) armState(l *Listener) (fresh, watched bool) {
	r.t.Helper()
	fresh, watched, err := l.Arm(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	if fresh && !watched {
		r.t.Error("Arm reported a fresh arming that is not watched")
	}
	return fresh, watched
}

// waitUnlocked waits until no relay holds the lock (a listener drops it
// after the signal, on its own goroutine).
func (r *notifyRig) waitUnlocked() {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if held, _ := r.lock(); held == 0 {
			return
		}
	}
	r.t.Fatal("the notify lock is still held after the wake")
}

// TestProducersNotifyOnlyWhileARelaySleeps: NOTIFY serialises commits, so
// the trigger notifies only while a relay has armed the channel, and the
// first notification disarms it.
func TestProducersNotifyOnlyWhileARelaySleeps(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()

	r.insert()
	r.quiet(l, "insert with no relay asleep")

	if !r.arm(l) {
		t.Fatal("Arm on an idle channel did not arm")
	}
	if fresh, watched := r.armState(l); fresh || !watched {
		t.Errorf("a second Arm reported fresh %v, watched %v; want watched only", fresh, watched)
	}
	if held, _ := r.lock(); held != 1 {
		t.Fatalf("armed, but %d exclusive holders", held)
	}
	r.insert()
	r.signalled(l, "insert while armed")
	r.waitUnlocked()
	r.insert()
	r.quiet(l, "insert after the wake disarmed")

	// Arming again after the wake is a fresh arming.
	if !r.arm(l) {
		t.Error("Arm after the wake did not arm")
	}
}

// TestWorkerRearmsRightAfterTheWake: the listener marks the lock dropped
// before it wakes the workers, so a worker that finds nothing and goes
// back to sleep at once arms again (on the session that still holds the
// lock) instead of trusting a hold about to go; the listener's unlock then
// leaves the re-arming in place.
func TestWorkerRearmsRightAfterTheWake(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()
	for round := range 20 {
		if round == 0 && !r.arm(l) {
			t.Fatal("did not arm")
		}
		r.insert()
		r.signalled(l, "insert while armed")
		if !r.arm(l) {
			t.Fatalf("round %d: Arm right after the wake did not arm again", round)
		}
	}
	time.Sleep(100 * time.Millisecond) // the last unlock
	if held, _ := r.lock(); held != 1 {
		t.Fatalf("%d holders after the re-armings", held)
	}
	r.insert()
	r.signalled(l, "insert after the re-armings")
	// One hold, one unlock: a count left over by a re-arming would keep
	// producers notifying for good.
	r.waitUnlocked()
}

// TestArmWaitsForProducersThatDidNotNotify is the race the lock closes: a
// producer that found every relay awake, and so did not notify, has not
// committed yet when the relay's last worker falls idle. The relay's
// request queues behind it (Arm reports fresh and watched: the worker
// claims once more, which sees producers that committed without notifying
// before the request queued, then sleeps), producers that commit meanwhile
// notify, and the grant, after the open producer's commit, wakes the
// workers to claim once more.
func TestArmWaitsForProducersThatDidNotNotify(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()

	open := r.begin() // did not notify: no relay was asleep
	// Fresh: producers that committed before the request queued are
	// visible to the claim the worker runs next; the open one's row comes
	// with the grant.
	if fresh, watched := r.armState(l); !fresh || !watched {
		t.Fatalf("with a producer that did not notify open, Arm reported fresh %v, watched %v; want both (claim once more, then sleep until the grant)", fresh, watched)
	}
	// The request is sent in the background.
	testenv.Eventually(t, 10*time.Second, func() bool { _, waiting := r.lock(); return waiting == 1 }, "the relay's request never queued")
	if held, _ := r.lock(); held != 0 {
		t.Fatalf("%d held while the producer is open", held)
	}
	if fresh, watched := r.armState(l); fresh || !watched {
		t.Errorf("a second Arm while the request waits reported fresh %v, watched %v; want watched only", fresh, watched)
	}

	// A producer that commits while the relay waits to arm notifies.
	r.insert()
	r.signalled(l, "insert while the relay waits to arm")

	if err := open.Commit(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.signalled(l, "the grant after the open producer committed")
	if held, waiting := r.lock(); held != 1 || waiting != 0 {
		t.Errorf("after the grant: %d held, %d waiting", held, waiting)
	}
	r.insert()
	r.signalled(l, "insert once armed by the grant")
}

// TestSecondRelayIsCoveredByTheFirst: one relay holds the lock; another
// that goes to sleep is covered (producers notify, and every listener
// hears it) and neither takes nor queues for the lock.
func TestSecondRelayIsCoveredByTheFirst(t *testing.T) {
	r := newNotifyRig(t)
	a, b := r.listen(), r.listen()
	if !r.arm(a) {
		t.Fatal("first relay did not arm")
	}
	// Covered, not watched: the relay polls as usual, since the cover may
	// end without a signal (the other relay drops the lock at its first
	// wake and may stay busy).
	if fresh, watched := r.armState(b); fresh || watched {
		t.Errorf("second relay: Arm reported fresh %v, watched %v; want neither (covered)", fresh, watched)
	}
	if held, waiting := r.lock(); held != 1 || waiting != 0 {
		t.Errorf("covered relay: %d held, %d waiting; want the first relay's hold only", held, waiting)
	}
	r.insert()
	r.signalled(a, "armed relay")
	r.signalled(b, "covered relay")
}

// TestCoverLostWakesTheCoveredRelay: the covering relay's lock goes
// without a notification (its connection died). The covered relay finds
// out at its next look, arms, and wakes its workers (a fresh arming).
func TestCoverLostWakesTheCoveredRelay(t *testing.T) {
	r := newNotifyRig(t)
	a, b := r.listen(), r.listen(50*time.Millisecond)
	if !r.arm(a) || r.arm(b) {
		t.Fatal("want a armed and b covered")
	}
	r.terminate(a.arm.conn.PgConn().PID())
	r.signalled(b, "covered relay after its cover died")
	if held, _ := r.lock(); held != 1 {
		t.Fatalf("%d holders after the hand-over", held)
	}
	r.insert()
	r.signalled(b, "insert once b armed")
}

// TestStoppingRelayHandsOver: a relay that shuts down while armed wakes
// the relays it covered, which arm in its place.
func TestStoppingRelayHandsOver(t *testing.T) {
	r := newNotifyRig(t)
	a, b := r.listen(), r.listen(time.Hour) // only the hand-over can wake b
	if !r.arm(a) || r.arm(b) {
		t.Fatal("want a armed and b covered")
	}
	r.stop(a)
	r.signalled(b, "covered relay after the hand-over")
	if !r.arm(b) {
		t.Error("b did not arm after the hand-over")
	}
}

// TestArmSurvivesALostConnection: the lock goes with its connection; the
// watch sees the loss and wakes the workers, which arm again.
func TestArmSurvivesALostConnection(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen(50 * time.Millisecond)
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	r.terminate(l.arm.conn.PgConn().PID())
	r.signalled(l, "lost arming connection")
	r.waitUnlocked() // the dying session may still hold it for a moment
	if !r.arm(l) {
		t.Fatal("Arm did not arm again after the loss")
	}
	r.insert()
	r.signalled(l, "insert after arming again")
}

// TestArmReconnectsAStaleConnection: the arming connection is kept between
// armings; one that died while nothing held the lock on it (a database
// restart, a cut network) is noticed by no one until the next Arm, which
// must arm on a new connection rather than fail: a worker that fails to
// arm polls until its next idle spell, 30 s later in a relay that relies
// on the wake (TestFaultWakeAfterDatabaseCut failed so).
func TestArmReconnectsAStaleConnection(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen(50 * time.Millisecond)
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	r.insert()
	r.signalled(l, "insert while armed")
	r.waitUnlocked() // disarmed: the connection stays, holding nothing
	l.arm.mu.Lock()
	conn := l.arm.conn
	l.arm.mu.Unlock()
	if conn == nil {
		t.Fatal("the arming connection was not kept after the disarm")
	}
	pid := conn.PgConn().PID()
	r.terminate(pid)
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		if err := r.d.pool.QueryRow(r.ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "the terminated arming session is still there")
	fresh, watched, err := l.Arm(r.ctx)
	if err != nil {
		t.Fatalf("Arm on a stale arming connection: %v", err)
	}
	if !fresh || !watched {
		t.Fatalf("Arm on a stale arming connection: fresh %v, watched %v; want a fresh arming", fresh, watched)
	}
	if held, _ := r.lock(); held != 1 {
		t.Fatalf("the notify lock is held %d times after arming again, want 1", held)
	}
	r.insert()
	r.signalled(l, "insert after arming on a new connection")
}

// TestNoArmingWithoutListen: while the LISTEN connection is down nobody
// hears a notification, so a held lock is handed over and nothing arms.
func TestNoArmingWithoutListen(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listenWith(func(l *Listener) { l.backoff = 3 * time.Second }) // time to look while LISTEN is down
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	var pid uint32
	if err := r.d.pool.QueryRow(r.ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'queuebox-listen' AND query = $1`,
		"LISTEN "+QuoteIdent(r.channel)).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	r.terminate(pid)
	// Workers that sleep until a notification go back to polling.
	r.signalled(l, "LISTEN connection lost")
	r.waitUnlocked()
	if fresh, watched := r.armState(l); fresh || watched {
		t.Errorf("while not listening, Arm reported fresh %v, watched %v; want neither (workers must poll)", fresh, watched)
	}
	r.signalled(l, "listening again") // the reconnect signals
	if !r.arm(l) {
		t.Error("did not arm once listening again")
	}
}

// TestArmAfterRunReturns: a worker that sleeps while the relay shuts down
// must not open an arming connection nobody closes.
func TestArmAfterRunReturns(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	r.stop(l)
	r.waitUnlocked()
	if r.arm(l) || l.arm.conn != nil {
		t.Error("Arm after Run returned opened a connection")
	}
}

// wakeEvents records a listener's WakeObserver calls.
type wakeEvents struct {
	mu     sync.Mutex
	events []string
}

func (w *wakeEvents) add(e string)          { w.mu.Lock(); w.events = append(w.events, e); w.mu.Unlock() }
func (w *wakeEvents) WakeListening(up bool) { w.add(fmt.Sprint("listening ", up)) }
func (w *wakeEvents) WakeArmed(armed bool)  { w.add(fmt.Sprint("armed ", armed)) }
func (w *wakeEvents) WakeNotified()         { w.add("notified") }
func (w *wakeEvents) snapshot() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.events, ", ")
}

// TestWakeObserverSeesTheGate: the listener reports its connection, its
// hold on the lock and each notification (the queuebox_wake_* metrics).
func TestWakeObserverSeesTheGate(t *testing.T) {
	r := newNotifyRig(t)
	obs := &wakeEvents{}
	l := r.listenWith(func(l *Listener) { l.Observe(obs) })
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	r.insert()
	r.signalled(l, "insert while armed")
	r.waitUnlocked()
	r.stop(l)
	want := "listening true, armed true, notified, armed false, listening false"
	if got := obs.snapshot(); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestNotifyTriggerState reads back what EnsureNotifyTrigger installed,
// and tells an earlier release's function (a NOTIFY on every insert) from
// the gated one.
func TestNotifyTriggerState(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	d := newDialect(t, pg.Pool)
	st, err := d.NotifyTriggerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Installed || st.Name != "outbox_qb_notify" {
		t.Fatalf("before install: %+v", st)
	}
	channel := "qb_it's_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	if err := d.EnsureNotifyTrigger(ctx, channel); err != nil {
		t.Fatal(err)
	}
	if st, err = d.NotifyTriggerState(ctx); err != nil || st != (NotifyTrigger{Name: "outbox_qb_notify", Installed: true, Channel: channel, Gated: true}) {
		t.Fatalf("after install: %+v, %v", st, err)
	}
	// The function as an earlier release wrote it.
	if _, err := pg.Pool.Exec(ctx, `CREATE OR REPLACE FUNCTION outbox_qb_notify() RETURNS trigger LANGUAGE plpgsql AS $qb$
BEGIN
    PERFORM pg_notify('old_channel', '');
    RETURN NULL;
END
$qb$`); err != nil {
		t.Fatal(err)
	}
	if st, err = d.NotifyTriggerState(ctx); err != nil || st != (NotifyTrigger{Name: "outbox_qb_notify", Installed: true, Channel: "old_channel"}) {
		t.Fatalf("earlier release's function: %+v, %v", st, err)
	}
}
